"""End to end in Chromium, at a desktop's size and a phone's: the leaderboard, the transparency
page and a model page fit the screen, no cell clips its text, names wrap only between words,
and the leaderboard's search and sortable columns work. Screenshots go to var/screenshots/."""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ratings import services
from ratings.flag_reasons import FLAG_REASON_TEXT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parent.parent / "var" / "screenshots"
# Names as long as real ones, with hyphens and spaces where they may wrap.
NAMES = {
    "alpha": ("Claude-Instant-1", "Anthropic"),
    "beta": ("Mixtral-8x22B-Instruct-v0.1", "Mistral AI"),
    "gamma": ("Llama 3.1 Nemotron 70B Instruct", "NVIDIA"),
}

# Every visible table cell whose content is wider than its box (clipped or spilling out).
CLIPPED_CELLS = """() => Array.from(document.querySelectorAll("td, th"))
  .filter((el) => el.checkVisibility() && el.scrollWidth > el.clientWidth + 1)
  .map((el) => `${el.tagName} ${el.textContent.trim().slice(0, 40)}: ${el.scrollWidth} > ${el.clientWidth}`)"""
# Every visible table box that needs scrolling sideways to show all its columns.
SCROLLING_TABLES = """() => Array.from(document.querySelectorAll(".table-scroll"))
  .filter((el) => el.checkVisibility() && el.scrollWidth > el.clientWidth + 1)
  .map((el) => `${el.firstElementChild.dataset.testid || el.firstElementChild.className}: ${el.scrollWidth} > ${el.clientWidth}`)"""
# The page's width beyond the window's (0 when nothing sticks out sideways).
PAGE_OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
# Each model name's line breaks, as the two characters either side of each: a break is fine
# after a space or a hyphen only.
NAME_BREAKS = """(selector) => Array.from(document.querySelectorAll(selector)).flatMap((el) => {
  const text = el.firstChild;
  if (!text || text.nodeType !== Node.TEXT_NODE) return [];
  const range = document.createRange();
  const tops = [];
  for (let i = 0; i < text.length; i++) {
    range.setStart(text, i); range.setEnd(text, i + 1);
    const rect = range.getClientRects()[0];
    tops.push(rect ? Math.round(rect.top) : null);
  }
  const breaks = [];
  for (let i = 1; i < tops.length; i++) {
    if (tops[i] !== null && tops[i - 1] !== null && tops[i] > tops[i - 1] + 2) {
      const before = text.data[i - 1];
      if (before !== " " && before !== "-" && text.data[i] !== " ") breaks.push(text.data.slice(0, i) + "|" + text.data.slice(i));
    }
  }
  return breaks;
})"""


@pytest.fixture
def computed(rated_models, make_vote, settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10
    for model in rated_models:
        model.display_name, model.organization = NAMES[model.slug]
        model.license = "Proprietary licence with a long name"
        model.save()
    for flag in ("identity_leak", "too_fast", "bot_user_agent"):
        vote = make_vote(rated_models[0], rated_models[1], "model_a")
        vote.flagged, vote.flags = True, [flag]
        vote.save()
    services.snapshot_refresh()
    # A second snapshot, so the rating-over-time charts have a line.
    for _ in range(4):
        make_vote(rated_models[1], rated_models[0], "model_a")
    return services.snapshot_refresh().snapshot


def check_layout(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}-{page.size_name}.png"), full_page=True)
    assert page.evaluate(PAGE_OVERFLOW) <= 0, f"{name} is wider than the window"
    assert page.evaluate(CLIPPED_CELLS) == []
    assert page.evaluate(SCROLLING_TABLES) == []
    assert page.evaluate(NAME_BREAKS, ".lb-table .model-title, .model-name") == []


def test_leaderboard_fits_and_names_wrap_between_words(asgi_server, sized_page, computed):
    page = sized_page
    page.goto(asgi_server.url + "/leaderboard")
    table = page.get_by_test_id("leaderboard-table")
    assert table.locator("tbody tr").count() == 3
    check_layout(page, "leaderboard")
    # Every rated column stays on screen: the votes cell ends inside the window.
    votes = table.locator("tbody tr").first.locator("td").last
    box = votes.bounding_box()
    assert box["x"] + box["width"] <= page.viewport_size["width"]
    # The rank spread and the tier are shown within the window: in their own columns on a
    # desktop; on a phone the spread under the rank and the tier as a label by the name.
    first = table.locator("tbody tr").first
    if page.size_name == "phone":
        spread = first.locator("td.rank .spread-inline")
        tier = first.get_by_test_id("tier-badge")
        assert tier.text_content() == "Tier 1"
        assert not table.locator("thead th.col-spread").is_visible()
    else:
        spread, tier = first.locator("td.spread"), first.locator("td.tier")
        assert table.locator("thead th.col-spread").text_content().strip() == "Rank spread"
        assert table.locator("thead th.col-tier").text_content().strip() == "Tier"
        assert tier.text_content() == "1"
        assert not first.get_by_test_id("tier-badge").is_visible()
    assert re.fullmatch(r"1(–[23])?", spread.text_content())
    for shown in (spread, tier):
        box = shown.bounding_box()
        assert box and 0 <= box["x"] and box["x"] + box["width"] <= page.viewport_size["width"]
    assert page.get_by_test_id("tier-note").is_visible()
    # Each tier after the first opens with a firmer line: its cells' top border is thicker
    # than a row's own.
    tops = table.locator("tbody tr").evaluate_all(
        "rows => rows.map((r) => [r.dataset.tier, getComputedStyle(r.cells[0]).borderTopWidth])"
    )
    for (tier, width), (previous, _) in zip(tops[1:], tops, strict=False):
        assert (width == "2px") is (tier != previous), tops
    drawn = page.get_by_test_id("over-time-plot").locator("svg").locator("visible=true")
    assert drawn.count() == 1 and drawn.locator("polyline").count() == 3
    assert drawn.get_attribute("width") == ("360" if page.size_name == "phone" else "640")
    # One intervals drawing is shown, the phone's on a phone, and its names are drawn at a size
    # one can read: no smaller than 10 px on the screen.
    shown = [t for t in ("forest-wide", "forest-narrow") if page.get_by_test_id(t).is_visible()]
    assert shown == (["forest-narrow"] if page.size_name == "phone" else ["forest-wide"])
    label = page.get_by_test_id(shown[0]).locator("text.label").first
    assert label.bounding_box()["height"] >= 10
    for testid in ("winrate-heatmap", "count-heatmap"):
        matrix = page.get_by_test_id(testid).locator("svg").locator("visible=true")
        assert (float(matrix.get_attribute("width")) <= 360) is (page.size_name == "phone")
        assert matrix.locator("text.label").first.bounding_box()["height"] >= 10
    style = page.get_by_test_id("style-plot").locator("svg").locator("visible=true")
    assert style.get_attribute("width") == ("360" if page.size_name == "phone" else "600")
    assert style.locator("text.label").first.bounding_box()["height"] >= 10
    # The phone's drawing has the room for a long name whole.
    whole = "Mixtral-8x22B-Instruct-v0.1" in page.get_by_test_id(shown[0]).inner_text()
    assert whole is (page.size_name == "phone")


def test_search_filters_rows_by_name_or_organisation(asgi_server, sized_page, computed):
    page = sized_page
    page.goto(asgi_server.url + "/leaderboard")
    rows = page.locator("[data-testid=leaderboard-table] tbody tr")
    search = page.get_by_test_id("model-search")

    search.fill("mixtral")
    assert [r.get_attribute("data-model") for r in rows.locator("visible=true").all()] == ["beta"]
    search.fill("nvidia")
    assert [r.get_attribute("data-model") for r in rows.locator("visible=true").all()] == ["gamma"]
    assert page.get_by_test_id("search-count").inner_text() == "1 of 3 rated models"
    search.fill("no such model")
    assert rows.locator("visible=true").count() == 0
    assert page.get_by_test_id("search-empty").is_visible()
    search.fill("")
    assert rows.locator("visible=true").count() == 3


def test_clicking_votes_sorts_rows_by_votes_and_sets_aria_sort(asgi_server, sized_page, computed):
    page = sized_page
    page.goto(asgi_server.url + "/leaderboard")
    table = page.get_by_test_id("leaderboard-table")
    header = table.locator("th[data-sort-key=votes]")

    def votes() -> list[int]:
        return [
            int(v)
            for v in table.locator("tbody tr").evaluate_all(
                "rows => rows.map((r) => r.dataset.votes)"
            )
        ]

    assert header.get_attribute("aria-sort") is None
    page.get_by_test_id("sort-votes").click()
    assert header.get_attribute("aria-sort") == "descending"
    assert votes() == sorted(votes(), reverse=True)
    assert table.locator("th[data-sort-key=rank]").get_attribute("aria-sort") is None

    page.get_by_test_id("sort-votes").press("Enter")
    assert header.get_attribute("aria-sort") == "ascending"
    assert votes() == sorted(votes())

    page.get_by_test_id("sort-rank").focus()
    page.keyboard.press("Space")
    assert table.locator("th[data-sort-key=rank]").get_attribute("aria-sort") == "ascending"
    ranks = table.locator("tbody tr").evaluate_all("rows => rows.map((r) => +r.dataset.rank)")
    assert ranks == sorted(ranks)


def test_transparency_fits_and_gives_reasons_in_words(asgi_server, sized_page, computed):
    page = sized_page
    page.goto(asgi_server.url + "/transparency")
    reasons = page.get_by_test_id("flag-reasons").locator("li")
    assert reasons.count() == 3
    for item in reasons.all():
        code = item.get_attribute("data-reason")
        text = item.inner_text()
        assert FLAG_REASON_TEXT[code] in text and code not in text
    fragility = page.get_by_test_id("fragility-table")
    expect(fragility).to_be_visible()
    first = fragility.locator("tbody tr").first
    assert "Claude-Instant-1 above Mixtral-8x22B-Instruct-v0.1" in first.inner_text()
    for kind in ("removal", "flip"):
        assert first.locator(f"td[data-kind={kind}]").inner_text().strip()
    # What the burst test does is said, with what it holds out (nothing here).
    expect(page.get_by_test_id("cohort-bursts")).to_contain_text(
        "Bursts of new visitors: 0 votes are held out."
    )
    check_layout(page, "transparency")


def test_model_page_fits_and_shows_the_model(asgi_server, sized_page, computed):
    page = sized_page
    page.goto(asgi_server.url + "/leaderboard")
    page.get_by_role("link", name="Mixtral-8x22B-Instruct-v0.1").click()
    page.wait_for_url("**/models/beta")
    assert page.locator("h1").inner_text() == "Mixtral-8x22B-Instruct-v0.1"
    assert "Mistral AI" in page.get_by_test_id("model-facts").inner_text()
    drawn = page.get_by_test_id("model-over-time").locator("svg").locator("visible=true")
    assert drawn.count() == 1 and drawn.locator("polyline").count() == 1
    assert drawn.get_attribute("width") == ("360" if page.size_name == "phone" else "640")
    assert page.get_by_test_id("opponents-table").locator("tbody tr").count() == 2
    check_layout(page, "model")


def test_unknown_model_is_a_not_found_page(asgi_server, sized_page, computed):
    response = sized_page.goto(asgi_server.url + "/models/no-such-model")
    assert response.status == 404
    assert sized_page.locator("h1").count() == 1
