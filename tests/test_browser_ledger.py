"""End to end in Chromium, on a laptop (1366x900) and a touch phone (390x844), in English and in
French: the fairness ledger on /transparency shows every provider's models (a private variant,
a withdrawn one, a retired one) and its retirements, and nothing sticks out sideways: the
tables fit a laptop and become one card per row on a phone. Screenshots go to var/screenshots/."""

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from arena.tests.ledger_history import ledger_history
from ratings import services
from tests.helpers import SIZES, csp_violations
from tests.test_browser_leaderboard_layout import (
    CLIPPED_CELLS,
    PAGE_OVERFLOW,
    SCREENSHOTS,
    SCROLLING_TABLES,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SLUGS = ("acme-one", "acme-secret", "acme-withdrawn", "bolt-main", "bolt-old", "local-model")
WORDS = {
    "en": {"title": "Fairness ledger", "none": "No model retired.", "never": "never published"},
    "fr": {"title": "Registre d’équité", "none": "Aucun modèle retiré.", "never": "jamais publié"},
}


@pytest.mark.parametrize("language", ["en", "fr"])
@pytest.mark.parametrize("size", sorted(SIZES))
def test_the_ledger_shows_every_row_and_fits_the_screen(
    asgi_server, browser, make_vote, size, language
):
    models = ledger_history(make_vote, timezone.now())
    # A long organisation name, as real ones are, must wrap rather than widen the page.
    models["bolt-main"].organization = "Bolt Laboratories International Research Division"
    models["bolt-main"].save()
    services.snapshot_refresh()
    words = WORDS[language]
    context = browser.new_context(**SIZES[size])
    context.add_cookies(
        [{"name": settings.LANGUAGE_COOKIE_NAME, "value": language, "url": asgi_server.url}]
    )
    violations = csp_violations(context)
    try:
        page = context.new_page()
        page.goto(asgi_server.url + "/transparency#ledger")
        ledger = page.get_by_test_id("fairness-ledger")
        expect(ledger.get_by_role("heading", name=words["title"])).to_be_visible()
        for slug in SLUGS:
            line = ledger.locator(f'[data-ledger-model="{slug}"]')
            line.scroll_into_view_if_needed()
            expect(line).to_be_visible()
            expect(line.locator("td.model")).to_contain_text(models[slug].display_name)
        withdrawn = ledger.locator('[data-ledger-model="acme-withdrawn"]')
        expect(withdrawn).to_contain_text(words["never"])
        retired = ledger.locator('[data-change="retired"]')
        expect(retired).to_have_count(2)
        expect(retired).to_contain_text(
            ["Variant withdrawn after private testing", "Endpoint shut down"]
        )
        expect(ledger.locator('[data-provider="Local vLLM"]')).to_contain_text(words["none"])
        # On a phone each row is a card: its cells one above the other, labelled.
        first_share = withdrawn.locator("td[data-kind=share]")
        label = first_share.evaluate("(el) => getComputedStyle(el, '::before').content")
        assert (label not in ("none", "normal", '""')) is (size == "phone"), label

        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"ledger-{size}-{language}.png"), full_page=True)
        assert page.evaluate(PAGE_OVERFLOW) <= 0, "the page is wider than the window"
        assert page.evaluate(CLIPPED_CELLS) == []
        assert page.evaluate(SCROLLING_TABLES) == []
        # Every row ends inside the window.
        width = page.viewport_size["width"]
        for box in ledger.locator("tr[data-ledger-model]").evaluate_all(
            "(rows) => rows.map((r) => r.getBoundingClientRect().right)"
        ):
            assert box <= width
    finally:
        context.close()
    assert not violations, "\n".join(violations)
