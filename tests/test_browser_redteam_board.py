"""In Chromium at both sizes: the red-team board shows a model's robustness after a refit run
by the task, with no CSP violation."""

import pytest
from playwright.sync_api import expect

from redteam import tasks
from redteam.tests.test_fits import _attempts

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_board_shows_the_models_robustness_after_a_refit(sized_page, live_server):
    _attempts()
    tasks.refit()
    sized_page.goto(f"{live_server.url}/redteam/leaderboard/")
    row = sized_page.locator('[data-testid="redteam-models"] tr[data-model="strong"]')
    expect(row).to_be_visible()
    expect(sized_page.locator("svg[role=img]")).to_be_visible()
    width = sized_page.evaluate("document.documentElement.scrollWidth")
    assert width <= sized_page.viewport_size["width"] + 1
