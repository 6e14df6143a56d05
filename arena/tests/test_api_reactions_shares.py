"""The visitor API's reactions and shares, and the shared outcome's page and card."""

import io
import json

import pytest
from django.test import Client
from PIL import Image

from arena.models import Reaction, Vote
from arena.tests.factories import pool_of

pytestmark = pytest.mark.django_db


def send(client, method, url, body):
    data = json.dumps(body)
    return getattr(client, method)(url, data=data, content_type="application/json")


@pytest.fixture
def battle(visitor):
    pool_of(n_models=2, n_prompts=1)
    return send(visitor, "post", "/api/battles", {}).json()


def react(client, battle, side="a", **body):
    return send(client, "put", f"/api/battles/{battle['id']}/reactions/{side}", body)


def test_a_visitor_reacts_to_each_side_and_clears_a_reaction(visitor, battle):
    response = react(visitor, battle, "a", liked=True, tags=["useful"])
    assert response.status_code == 200
    assert response.json() == {
        "side": "a",
        "liked": True,
        "tags": ["useful"],
        "after_reveal": False,
    }
    assert react(visitor, battle, "b", liked=False, tags=["incorrect"]).status_code == 200
    assert Reaction.objects.count() == 2

    cleared = react(visitor, battle, "a", liked=None)
    assert cleared.json()["liked"] is None
    assert list(Reaction.objects.values_list("side", flat=True)) == ["b"]


@pytest.mark.parametrize(
    ("side", "body", "field"),
    [
        ("c", {"liked": True}, "side"),
        ("a", {"liked": "up"}, "liked"),
        ("a", {"liked": True, "tags": ["incorrect"]}, "tags.0"),
    ],
)
def test_a_bad_reaction_is_a_400_naming_the_field(visitor, battle, side, body, field):
    response = react(visitor, battle, side, **body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert not Reaction.objects.exists()


def test_another_visitor_cannot_react_to_the_battle(other_visitor, battle):
    assert react(other_visitor, battle, liked=True).status_code == 404


def test_a_reaction_without_the_csrf_token_is_refused(battle, visitor):
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = visitor.cookies
    response = react(strict, battle, liked=True)
    assert response.status_code == 403 and response.json()["error"]["code"] == "csrf_failed"


def test_a_shared_outcome_opens_for_a_stranger_and_shows_the_prompt_only_if_agreed(visitor, battle):
    early = send(visitor, "post", f"/api/battles/{battle['id']}/share", {"include_prompt": True})
    assert early.status_code == 409  # the names are still secret

    send(visitor, "post", f"/api/battles/{battle['id']}/vote", {"winner": "model_b"})
    vote = Vote.objects.get()
    prompt = battle["turns"][0]["prompt"]
    hidden = send(visitor, "post", f"/api/battles/{battle['id']}/share", {"include_prompt": False})
    shown = send(visitor, "post", f"/api/battles/{battle['id']}/share", {"include_prompt": True})
    assert hidden.status_code == shown.status_code == 201
    assert hidden.json()["url"] != shown.json()["url"]

    stranger = Client()
    page = stranger.get(hidden.json()["url"])
    assert page.status_code == 200
    text = page.content.decode()
    winner, loser = vote.battle.model_b.display_name, vote.battle.model_a.display_name
    assert f"I preferred {winner} to {loser}" in text
    assert prompt not in text
    assert 'property="og:image"' in text and hidden.json()["card_url"] in text
    assert prompt in stranger.get(shown.json()["url"]).content.decode()

    card = stranger.get(shown.json()["card_url"])
    assert card.status_code == 200 and card["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(card.content)).size == (1200, 630)


def test_an_unknown_share_is_the_sites_404_page():
    response = Client().get("/s/not-a-token")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert Client().get("/s/not-a-token.png").status_code == 404


def test_the_include_prompt_choice_must_be_a_boolean(visitor, battle):
    send(visitor, "post", f"/api/battles/{battle['id']}/vote", {"winner": "tie"})
    response = send(visitor, "post", f"/api/battles/{battle['id']}/share", {"include_prompt": 1})
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "include_prompt"


def test_the_vote_records_the_pages_language(battle, visitor):
    visitor.cookies["django_language"] = "fr"
    send(visitor, "post", f"/api/battles/{battle['id']}/vote", {"winner": "tie"})
    assert Vote.objects.get().interface_language == "fr"
