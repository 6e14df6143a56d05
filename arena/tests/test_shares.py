"""Sharing an outcome: who may share, what a share shows, and its card."""

import io
import re

import pytest
from PIL import Image

from arena.errors import ArenaError
from arena.models import BattleShare
from arena.services.shares import share_create
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.share_card import HEIGHT, WIDTH, card_png
from arena.shares import PROMPT_EXCERPT_CHARS, share_headline, share_outcome
from arena.tests.factories import ArenaModelFactory, BattleFactory, PromptFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def battle():
    return BattleFactory(
        model_a=ArenaModelFactory(display_name="Model North", organization="Org N"),
        model_b=ArenaModelFactory(display_name="Model South"),
        prompt=PromptFactory(turns=["Explain tides to a child, please."]),
    )


def vote(battle, winner="model_b"):
    terms_accept(voter_id="voter-1")
    vote_record(battle_id=battle.id, session_key="session-1", voter_id="voter-1", winner=winner)


def test_a_battle_is_shared_only_after_its_vote(battle):
    with pytest.raises(ArenaError) as caught:
        share_create(battle_id=battle.id, session_key="session-1", include_prompt=False)
    assert caught.value.status == 409 and caught.value.field == "battle_id"
    assert not BattleShare.objects.exists()


def test_another_session_cannot_share_the_battle(battle):
    vote(battle)
    with pytest.raises(ArenaError) as caught:
        share_create(battle_id=battle.id, session_key="session-2", include_prompt=False)
    assert caught.value.status == 404


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_include_prompt_must_be_a_boolean(battle, value):
    vote(battle)
    with pytest.raises(ArenaError) as caught:
        share_create(battle_id=battle.id, session_key="session-1", include_prompt=value)
    assert caught.value.status == 400 and caught.value.field == "include_prompt"


def test_sharing_twice_with_the_same_choice_gives_the_same_share(battle):
    vote(battle)
    first = share_create(battle_id=battle.id, session_key="session-1", include_prompt=True)
    again = share_create(battle_id=battle.id, session_key="session-1", include_prompt=True)
    other = share_create(battle_id=battle.id, session_key="session-1", include_prompt=False)
    assert first.pk == again.pk and other.pk != first.pk
    assert len(first.token) >= 16 and first.token != other.token


def test_the_outcome_names_the_chosen_model_and_hides_the_prompt_unless_agreed(battle):
    vote(battle, winner="model_b")
    hidden = share_create(battle_id=battle.id, session_key="session-1", include_prompt=False)
    shown = share_create(battle_id=battle.id, session_key="session-1", include_prompt=True)

    outcome = share_outcome(token=hidden.token)
    assert outcome.chosen.name == "Model South" and outcome.other.name == "Model North"
    assert outcome.prompt is None
    assert share_headline(outcome) == "In a blind battle, I preferred Model South to Model North"
    assert share_outcome(token=shown.token).prompt == "Explain tides to a child, please."
    assert share_outcome(token="no-such-token") is None


@pytest.mark.parametrize(
    ("winner", "headline"),
    [
        ("tie", "In a blind battle, Model North and Model South tied"),
        ("tie (bothbad)", "In a blind battle, neither Model North nor Model South convinced me"),
    ],
)
def test_a_tie_and_both_bad_are_phrased_without_a_winner(battle, winner, headline):
    vote(battle, winner=winner)
    share = share_create(battle_id=battle.id, session_key="session-1", include_prompt=False)
    outcome = share_outcome(token=share.token)
    assert outcome.chosen is None and share_headline(outcome) == headline


def test_a_long_prompt_is_cut_for_the_card_at_a_word_with_an_ellipsis(battle):
    battle.messages.filter(turn=0).update(user_content="word " * 100)
    vote(battle)
    share = share_create(battle_id=battle.id, session_key="session-1", include_prompt=True)
    excerpt = share_outcome(token=share.token).prompt_excerpt
    assert len(excerpt) <= PROMPT_EXCERPT_CHARS and excerpt.endswith("…")


def test_the_card_is_a_png_of_the_link_preview_size_with_ink_where_text_goes():
    png = card_png(
        headline="In a blind battle, I preferred A very long model name " * 3,
        prompt="x" * 500,  # a word longer than a line is cut, not drawn past the edge
        footer="Vote blind: arena.example",
    )
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == (WIDTH, HEIGHT)
    background = image.getpixel((5, 5))
    assert image.getpixel((WIDTH - 5, HEIGHT // 2)) == background  # the right margin stays clear
    colours = {image.getpixel((x, y)) for x in range(60, 900, 3) for y in range(140, 220, 3)}
    assert len(colours) > 2  # the headline's strokes, anti-aliased, not a blank card


def test_the_card_is_drawn_once_per_language_and_served_from_the_cache(battle, client, monkeypatch):
    from arena import views

    vote(battle)
    share = share_create(battle_id=battle.id, session_key="session-1", include_prompt=False)
    drawn = []
    real = views.card_png

    def counting(**kwargs):
        drawn.append(kwargs["headline"])
        return real(**kwargs)

    monkeypatch.setattr(views, "card_png", counting)
    url = f"/s/{share.token}.png"
    first, again = client.get(url), client.get(url)
    assert first.status_code == again.status_code == 200
    assert first["Content-Type"] == "image/png"
    assert first["Cache-Control"] == "public, max-age=86400"
    assert first.content == again.content
    french = client.get(url, headers={"accept-language": "fr"})
    assert french.status_code == 200 and french.content != first.content
    assert len(drawn) == 2 and drawn[0] != drawn[1]  # one English headline, one French
    assert client.get("/s/no-such-token.png").status_code == 404


def _og(page: str, prop: str) -> str:
    match = re.search(rf'<meta property="og:{prop}" content="([^"]*)">', page)
    assert match is not None, prop
    return match.group(1)


def test_a_share_pages_links_are_on_the_public_origin_whatever_the_host_header(
    battle, client, settings
):
    # The Host header is the client's to choose (an allowed host with another port here): the
    # links a crawler copies into a preview name the site's configured origin instead.
    settings.ARENA_PUBLIC_ORIGIN = "https://arena.example.org"
    vote(battle)
    share = share_create(battle_id=battle.id, session_key="session-1", include_prompt=False)
    page = client.get(f"/s/{share.token}", headers={"host": "localhost:1"}).content.decode()
    assert _og(page, "url") == f"https://arena.example.org/s/{share.token}"
    assert _og(page, "image") == f"https://arena.example.org/s/{share.token}.png"
    assert "localhost:1" not in page


def test_the_card_names_the_public_host_and_is_drawn_once_whatever_the_host_header(
    battle, client, settings, monkeypatch
):
    from arena import views

    settings.ARENA_PUBLIC_ORIGIN = "https://arena.example.org"
    vote(battle)
    share = share_create(battle_id=battle.id, session_key="session-1", include_prompt=False)
    footers = []
    real = views.card_png

    def recording(**kwargs):
        footers.append(kwargs["footer"])
        return real(**kwargs)

    monkeypatch.setattr(views, "card_png", recording)
    for host in ("localhost:1", "127.0.0.1", "localhost:2"):
        assert client.get(f"/s/{share.token}.png", headers={"host": host}).status_code == 200
    assert footers == ["Vote blind: arena.example.org"]
