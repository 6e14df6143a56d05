"""End to end in Chromium, desktop size: a mixed battle on the pool page, the stored side shown
at once and the live side streamed from the loopback fake upstream, turn by turn, to the vote."""

import re

import pytest
from playwright.sync_api import expect

from arena.models import Battle, Vote
from arena.tests.factories import pool_of
from arena.tests.fake_openai import FakeModel
from tests.helpers import assert_names_revealed
from tests.test_browser_live import record_frames

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_visitor_reads_a_stored_answer_watches_the_live_one_stream_and_votes(
    asgi_server, page, fake_upstream, live_models, settings
):
    settings.ARENA_BRIDGE_SHARE = 1.0
    live_models[1].is_active = False
    live_models[1].save()
    live = live_models[0]
    pool_of(n_models=2, n_prompts=1, turns=2)
    fake_upstream.models[live.upstream_model_id] = FakeModel(
        tokens=["Live ", "**answer** ", "streamed."], delay=0.05
    )
    frames = record_frames(page)

    page.goto(asgi_server.url + "/?mode=pool")
    page.get_by_test_id("terms-accept").click()
    expect(page.locator("#terms")).to_be_hidden()

    battle = Battle.objects.get()
    assert battle.source == Battle.Source.MIXED
    live_side, stored_side = battle.live_side, "b" if battle.live_side == "a" else "a"
    stored = battle.prompt.completions.get(model_id=getattr(battle, f"model_{stored_side}_id"))
    stored_box = page.get_by_test_id(f"response-{stored_side}")
    live_box = page.get_by_test_id(f"response-{live_side}")
    expect(stored_box).to_contain_text(stored.turns[0], use_inner_text=True)
    expect(stored_box).to_contain_text(stored.turns[1], use_inner_text=True)
    # Both turns of the live side stream in, each its own block, bold rendered as markdown.
    expect(live_box.locator(".turn")).to_have_count(2)
    expect(live_box.locator(".turn").nth(1)).to_have_text(
        re.compile(r"Live answer streamed\."), use_inner_text=True
    )
    expect(live_box.locator("strong").first).to_have_text("answer")
    expect(page.get_by_test_id("vote-a")).to_be_enabled()
    expect(page.locator("#status")).to_have_text(re.compile("Vote for the better one"))
    assert sum('"type": "stream"' in f or '"type":"stream"' in f for f in frames) == 2

    page.get_by_test_id(f"vote-{live_side}").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A", use_inner_text=True)
    vote = Vote.objects.get()
    assert vote.battle_id == battle.pk and vote.winner == f"model_{live_side}"
    assert_names_revealed(page, vote.battle)
    expect(page.get_by_test_id("next-battle")).to_be_visible()
