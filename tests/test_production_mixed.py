"""A mixed battle in the production shape: production settings, uvicorn workers, the Redis
channel layer, PostgreSQL. A live model registered as an operator would, with no votes yet, is
bridged to the pool: a visitor's pool battle sets its live answer, streamed over the battle
websocket, against a demo model's stored answer, and the vote is recorded as a mixed battle's."""

from __future__ import annotations

import re

import pytest

from tests.helpers import revealed_names
from tests.test_production_shape import (
    LIVE_MODELS,
    UI_TIMEOUT_MS,
    _browser_context,
    _latest_vote,
    production,
)

__all__ = ["production"]  # a fixture, used by name

pytestmark = [
    pytest.mark.production,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.browser,
    pytest.mark.timeout(900),
]


@pytest.fixture
def production_env() -> dict[str, str]:
    # Every pool draw bridges while a live model is not established (the walk of
    # tests/test_production_shape.py turns bridging off; this one turns it always on).
    return {"ARENA_BRIDGE_SHARE": "1"}


def test_a_new_live_model_streams_its_answer_to_a_pool_prompt_against_a_stored_one(
    production, browser
):
    from playwright.sync_api import expect

    shape, database = production
    slug, (display_name, upstream_id, tokens) = next(iter(LIVE_MODELS.items()))
    shape.manage(
        "add_model",
        "--slug",
        slug,
        "--provider-url",
        shape.upstream.url,
        "--upstream-model",
        upstream_id,
        "--display-name",
        display_name,
        "--organization",
        "Quillwort Labs",
    )
    context = _browser_context(browser, shape)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(shape.url + "/?mode=pool")
        page.get_by_test_id("terms-accept").click()
        expect(page.get_by_test_id("terms-accept")).to_be_hidden(timeout=UI_TIMEOUT_MS)
        shape.wait_for(
            "the mixed battle on record",
            lambda: (
                database.query("SELECT count(*) FROM arena_battle WHERE source = 'mixed'") == [(1,)]
            ),
        )
        [(live_side,)] = database.query("SELECT live_side FROM arena_battle WHERE source = 'mixed'")
        stored_side = "b" if live_side == "a" else "a"
        # The live answer streams in over the battle socket (through Redis, between workers).
        answer = " ".join("".join(tokens).replace("#", "").replace("*", "").split())
        live_box = page.get_by_test_id(f"response-{live_side}")
        # Every turn of the pool prompt is answered (two in the demo), each in its own block.
        words = re.compile(r"\s+".join(re.escape(w) for w in answer.split()))
        expect(live_box.locator(".turn").last).to_contain_text(
            words, timeout=UI_TIMEOUT_MS, use_inner_text=True
        )
        expect(page.get_by_test_id(f"response-{stored_side}")).not_to_be_empty(
            timeout=UI_TIMEOUT_MS
        )
        expect(page.get_by_test_id(f"vote-{live_side}")).to_be_enabled(timeout=UI_TIMEOUT_MS)
        page.get_by_test_id(f"vote-{live_side}").click()
        expect(page.get_by_test_id("model-name-a")).not_to_have_text(
            "Model A", timeout=UI_TIMEOUT_MS
        )
        source, winner, name_a, name_b = _latest_vote(database)
        assert (source, winner) == ("mixed", f"model_{live_side}")
        assert display_name == (name_a if live_side == "a" else name_b)
        assert revealed_names(page) == (name_a, name_b)
        assert errors == []
    finally:
        context.close()
