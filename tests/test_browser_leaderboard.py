"""End to end in Chromium: the leaderboard page's table, toggles, charts and downloads."""

import pytest

from ratings import services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def computed(rated_models, settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    return services.snapshot_refresh().snapshot


def test_visitor_reads_the_leaderboard_and_switches_style_and_category(asgi_server, page, computed):
    page.goto(asgi_server.url + "/leaderboard")

    table = page.get_by_test_id("leaderboard-table")
    assert table.locator("tbody tr").count() == 3
    assert table.locator("tbody tr").first.get_attribute("data-model") == "alpha"
    assert "vote" in page.get_by_test_id("last-updated").inner_text()
    for testid in ("forest-plot", "winrate-heatmap", "count-heatmap", "style-plot"):
        assert page.get_by_test_id(testid).locator("svg").locator("visible=true").count() == 1
    nav = page.get_by_role("navigation", name="Main").get_by_role("link", name="Leaderboard")
    assert nav.get_attribute("aria-current") == "page"

    with page.expect_navigation():
        page.get_by_test_id("style-toggle").click(force=True)
    assert "style=off" in page.url
    assert not page.get_by_test_id("style-toggle").is_checked()
    assert page.get_by_test_id("style-plot").count() == 0

    with page.expect_navigation():
        page.get_by_test_id("category-select").select_option("coding")
    assert "category=coding" in page.url
    assert "Not enough votes" in page.get_by_test_id("category-insufficient").inner_text()

    with page.expect_navigation():
        page.get_by_test_id("category-select").select_option("lang-en")
    assert page.get_by_test_id("leaderboard-table").is_visible()
    href = page.get_by_test_id("download-csv").get_attribute("href")
    assert href == "/leaderboard.csv?category=lang-en&style=off"
    download = page.request.get(asgi_server.url + href)
    assert download.ok and download.text().splitlines()[0].startswith("rank,model,name")
    body = page.request.get(
        asgi_server.url + page.get_by_test_id("download-json").get_attribute("href")
    ).json()
    assert body["category"]["key"] == "lang-en" and body["style_control"] is False


def test_leaderboard_before_the_first_run_says_not_computed_yet(asgi_server, page):
    page.goto(asgi_server.url + "/leaderboard")
    assert "Not computed yet" in page.get_by_test_id("leaderboard-empty").inner_text()
