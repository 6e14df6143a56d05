"""End to end in Chromium, at a desktop's size and a phone's: a visitor reacts to both answers
with reasons, votes, and shares the outcome; a stranger opens the link. The reactions are
stored and come out in the export."""

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from arena.exports import ExportStats, export_rows, voted_battles
from arena.models import Battle, Reaction, Vote
from tests.helpers import SIZES, csp_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parent.parent / "var" / "screenshots" / "reactions"


@pytest.mark.parametrize("size", sorted(SIZES))
def test_a_visitor_reacts_votes_and_shares_and_a_stranger_opens_the_link(
    asgi_server, browser, size
):
    call_command("load_demo", verbosity=0)
    context = browser.new_context(**SIZES[size])
    violations = csp_violations(context)
    page = context.new_page()
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-b")).not_to_be_empty()

    page.get_by_test_id("react-up-a").click()
    page.get_by_test_id("reaction-tag-a-useful").click()
    page.get_by_test_id("react-down-b").click()
    page.get_by_test_id("reaction-tag-b-incorrect").click()
    expect(page.get_by_test_id("reaction-tag-a-useful")).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_test_id("reactions-b").get_by_role("status")).to_have_text("Saved.")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"reacted-{size}.png"), full_page=True)

    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("share-make")).to_be_visible()
    page.get_by_test_id("share-include-prompt").check()
    page.get_by_test_id("share-make").click()
    expect(page.get_by_test_id("share-url")).to_have_value(re.compile(r"/s/[\w-]{16}$"))
    url = page.get_by_test_id("share-url").input_value()
    page.screenshot(path=str(SCREENSHOTS / f"shared-{size}.png"), full_page=True)

    battle = Vote.objects.exclude(battle__source=Battle.Source.IMPORT).get().battle
    reactions = {r.side: (r.liked, r.tags, r.after_reveal) for r in Reaction.objects.all()}
    assert reactions == {"a": (True, ["useful"], False), "b": (False, ["incorrect"], False)}
    exported = [
        row
        # include_flagged: a headless browser's vote is flagged as a bot's
        for row in export_rows(voted_battles(include_flagged=True), "kto-reactions", ExportStats())
        if row["model"] in (battle.model_a.slug, battle.model_b.slug)
    ]
    assert sorted((row["label"], row["tags"]) for row in exported) == [
        (False, ["incorrect"]),
        (True, ["useful"]),
    ]

    stranger = browser.new_context(**SIZES[size])
    seen = csp_violations(stranger)
    shared = stranger.new_page()
    shared.goto(url)
    headline = shared.get_by_test_id("share-headline").inner_text()
    assert (
        headline
        == f"In a blind battle, I preferred {battle.model_a.display_name} to {battle.model_b.display_name}"
    )
    expect(shared.get_by_test_id("share-prompt")).to_be_visible()
    assert shared.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    card = shared.locator("img.share-card")
    assert card.evaluate("img => img.complete && img.naturalWidth") == 1200
    shared.screenshot(path=str(SCREENSHOTS / f"stranger-{size}.png"), full_page=True)
    stranger.close()
    context.close()
    assert not violations and not seen, violations + seen
