"""End to end in Chromium with the proof-of-work challenge on (as in production): the page
solves it by itself, under the strict CSP, and the visitor's vote counts."""

import hashlib
import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from arena.models import Battle, Vote

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_page_solves_the_challenge_before_the_first_vote_and_the_vote_counts(
    asgi_server, page, settings
):
    settings.ARENA_CHALLENGE = True
    settings.ARENA_CHALLENGE_MAX_NUMBER = 100_000  # the default: a real search, not a token one
    call_command("load_demo", verbosity=0)
    calls = []
    page.on(
        "response",
        lambda r: (
            calls.append((r.request.method, r.url.split("/api/", 1)[-1], r.status))
            if "/api/" in r.url
            else None
        ),
    )
    page.goto(asgi_server.url + "/?mode=pool")
    assert page.locator("section.battle").get_attribute("data-challenge") == "true"
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-b")).to_have_text(re.compile(r"\S"), use_inner_text=True)

    page.get_by_test_id("vote-b").click()
    expect(page.get_by_test_id("model-name-b")).not_to_have_text("Model B", use_inner_text=True)
    vote = Vote.objects.exclude(battle__source=Battle.Source.IMPORT).get()
    assert vote.winner == "model_b"
    assert ("GET", "challenge", 200) in calls
    assert ("POST", "challenge/verify", 200) in calls
    votes = [c for c in calls if c[1].endswith("/vote")]
    assert votes and all(status == 201 for _, _, status in votes)  # no 403 on the way

    # The second vote of the session needs no new challenge.
    page.get_by_test_id("next-battle").click()
    expect(page.get_by_test_id("vote-a")).to_be_enabled()
    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A", use_inner_text=True)
    assert Vote.objects.exclude(battle__source=Battle.Source.IMPORT).count() == 2
    assert sum(1 for c in calls if c[1] == "challenge/verify") == 1

    # The page's own SHA-256 agrees with hashlib across the padding's block boundaries.
    texts = ["", "abc", "a" * 55, "a" * 56, "a" * 64, "b" * 119, "héllo ✓ 日本", "s?expires=9&42"]
    hashes = page.evaluate(
        "async (texts) => texts.map((await import('/static/js/challenge.js')).sha256Hex)",
        texts,
    )
    assert hashes == [hashlib.sha256(t.encode()).hexdigest() for t in texts]
