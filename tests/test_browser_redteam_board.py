"""In Chromium at both sizes: the red-team board shows a model's robustness after a refit run
by the task, with no CSP violation."""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from redteam import tasks
from redteam.tests.test_fits import _attempts

SCREENSHOTS = Path(__file__).resolve().parent.parent / "var" / "screenshots"
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_board_shows_the_models_robustness_after_a_refit(sized_page, live_server):
    _attempts()
    tasks.refit()
    sized_page.goto(f"{live_server.url}/redteam/leaderboard/")
    row = sized_page.locator('[data-testid="redteam-models"] tr[data-model="strong"]')
    expect(row).to_be_visible()
    # The robustness intervals, drawn as the leaderboard draws ratings: the phone's layout on a
    # phone, names readable (at least 10 px high on the screen), two decimals on a logit scale.
    phone = sized_page.viewport_size["width"] < 640
    drawn = sized_page.get_by_test_id("robustness-narrow" if phone else "robustness-wide")
    expect(drawn.locator("svg[role=img]")).to_be_visible()
    expect(
        sized_page.get_by_test_id("robustness-wide" if phone else "robustness-narrow")
    ).to_be_hidden()
    assert drawn.locator("text.label").first.bounding_box()["height"] >= 10
    assert re.fullmatch(r"-?\d+\.\d\d", drawn.locator("text.value").first.text_content())
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = "phone" if phone else "desktop"
    sized_page.screenshot(path=str(SCREENSHOTS / f"redteam-board-{size}.png"), full_page=True)
    width = sized_page.evaluate("document.documentElement.scrollWidth")
    assert width <= sized_page.viewport_size["width"] + 1


def test_a_player_joins_the_board_from_the_form_and_a_taken_name_is_refused(
    sized_page, live_server
):
    from redteam.models import PlayerProfile

    PlayerProfile.objects.create(player_id="someone-else", pseudonym="Mallory", on_board=True)
    sized_page.goto(f"{live_server.url}/redteam/leaderboard/")
    form = sized_page.get_by_test_id("rt-profile")
    form.get_by_label("Pseudonym").fill("Mallory")
    form.get_by_label("Show me on the players' board").check()
    form.get_by_role("button", name="Save").click()
    expect(form.get_by_role("status")).to_have_text("That pseudonym is taken.")
    expect(form.get_by_label("Pseudonym")).to_have_attribute("aria-invalid", "true")
    form.get_by_label("Pseudonym").fill("Trudy")
    form.get_by_role("button", name="Save").click()
    expect(form.get_by_role("status")).to_have_text("Saved: you are on the players' board.")
    assert PlayerProfile.objects.get(pseudonym="Trudy").on_board is True
    sized_page.reload()
    expect(sized_page.get_by_label("Pseudonym")).to_have_value("Trudy")
    expect(sized_page.get_by_label("Show me on the players' board")).to_be_checked()
