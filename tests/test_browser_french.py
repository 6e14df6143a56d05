"""End to end in Chromium, on a laptop and on a touch phone: a visitor switches to French and
walks the battle page (terms, a pool battle, a reaction, a vote, the reveal and its share
link), the leaderboard, the transparency page, a model page and the red-teaming pages, and no
English phrase of the catalogues is left on any of them."""

import re

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from ratings import services
from tests.helpers import SIZES, csp_violations
from tests.test_catalogues import LOCALE, read_po

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


# Content, not chrome: answers, prompts and model names are the models' and visitors' words.
CONTENT = ", ".join(
    (
        ".response",
        ".prompt",
        ".model-name",
        ".model-title",
        ".slug",
        ".org",
        ".org-inline",
        "a[href^='/models/']",
    )
)
PLACEHOLDER_OR_TAG = re.compile(r"%\(\w+\)[sd]|%[sd]|<[^>]+>")


def english_phrases() -> set[str]:
    """Every phrase of two words or more of a French catalogue's English messages that its
    translation does not keep: the text between placeholders and tags, so that a message with
    a placeholder is caught too."""
    phrases: set[str] = set()
    for path in sorted((LOCALE / "fr" / "LC_MESSAGES").glob("*.po")):
        for entry in read_po(path)[1:]:
            translations = " ".join(entry.msgstr.values()).replace("%%", "%")
            for msgid in (entry.msgid, entry.msgid_plural or ""):
                for part in PLACEHOLDER_OR_TAG.split(msgid.replace("%%", "%")):
                    phrase = " ".join(part.split()).strip(" ,.;:()·")
                    if len(phrase.split()) >= 2 and phrase not in translations:
                        phrases.add(phrase)
    return phrases


def chrome_text(page: Page) -> str:
    """The page's visible text without its content: each content element is emptied while
    ``innerText`` is read, then given its nodes back (all in one task, so nothing repaints)."""
    return page.evaluate(
        """(selector) => {
            const saved = Array.from(document.querySelectorAll(selector)).map((el) => {
                const nodes = Array.from(el.childNodes);
                el.replaceChildren();
                return [el, nodes];
            });
            const text = document.body.innerText;
            saved.forEach(([el, nodes]) => el.replaceChildren(...nodes));
            return text;
        }""",
        CONTENT,
    )


def assert_french(page: Page, phrases: set[str], state: str) -> None:
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    text = " ".join(chrome_text(page).split())
    left = sorted(phrase for phrase in phrases if phrase in text)
    assert left == [], f"English on {state}: {left}"


@pytest.mark.parametrize("size", sorted(SIZES))
def test_a_french_visitor_sees_no_english_on_the_battle_and_rating_pages(
    asgi_server, browser, size
):
    phrases = english_phrases()
    assert "Both answers are complete" in " ".join(phrases)  # the scripts' catalogue is read
    assert "Bradley-Terry ratings from anonymous human votes" in " ".join(phrases)
    call_command("load_demo", verbosity=0)
    context = browser.new_context(**SIZES[size])
    violations = csp_violations(context)
    page = context.new_page()
    page.goto(asgi_server.url + "/about")
    page.get_by_test_id("language-select").select_option("fr")
    expect(page.locator("html")).to_have_attribute("lang", "fr")

    page.goto(asgi_server.url + "/")
    expect(page.locator("#terms")).to_be_visible()
    assert_french(page, phrases, "the terms")
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-b")).not_to_be_empty()
    expect(page.get_by_test_id("vote-a")).to_be_enabled()
    assert_french(page, phrases, "a pool battle")

    page.get_by_test_id("react-up-a").click()
    expect(page.get_by_test_id("reaction-tag-a-useful")).to_have_text("Utile")
    page.get_by_test_id("reaction-tag-a-useful").click()
    expect(page.get_by_test_id("reactions-a").get_by_role("status")).to_have_text("Enregistrée.")
    assert_french(page, phrases, "a reaction")

    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("verdict")).to_contain_text("Vous avez préféré")
    expect(page.get_by_test_id("share-make")).to_be_visible()
    assert_french(page, phrases, "the reveal")
    page.get_by_test_id("share-make").click()
    expect(page.get_by_test_id("share-url")).to_have_value(re.compile(r"/s/[\w-]{16}$"))
    assert_french(page, phrases, "the share link")

    services.snapshot_refresh()
    page.goto(asgi_server.url + "/leaderboard")
    rows = page.get_by_test_id("leaderboard-table").locator("tbody tr")
    expect(rows.first).to_be_visible()
    assert_french(page, phrases, "the leaderboard")
    # The rank spread and the tiers are named in French: their own columns on a laptop; on a
    # phone the spread under each rank and the tier as a label by each name.
    table = page.get_by_test_id("leaderboard-table")
    expect(page.get_by_test_id("tier-note")).to_contain_text("Plage de rangs")
    if size == "phone":
        expect(table.locator("td.rank .spread-inline").first).to_be_visible()
        expect(table.get_by_test_id("tier-badge").first).to_have_text(re.compile(r"^Classe \d+$"))
    else:
        expect(table.locator("thead th.col-spread")).to_have_text("Plage de rangs")
        expect(table.locator("thead th.col-tier")).to_have_text("Classe")
        expect(table.locator("td.spread").first).to_have_text(re.compile(r"^\d+(–\d+)?$"))
    # One-word labels escape the phrase check: the categories' names are French too.
    expect(page.get_by_test_id("category-select").locator("option:checked")).to_contain_text(
        "Général"
    )
    slug = rows.first.get_attribute("data-model")

    page.goto(asgi_server.url + "/transparency")
    expect(page.get_by_test_id("models-served")).to_be_visible()
    assert_french(page, phrases, "the transparency page")

    page.goto(f"{asgi_server.url}/models/{slug}")
    expect(page.get_by_test_id("model-page")).to_be_visible()
    assert_french(page, phrases, "a model page")

    page.goto(asgi_server.url + "/redteam/")
    expect(page.get_by_test_id("redteam-live-off")).to_be_visible()
    assert_french(page, phrases, "the red-teaming page")
    page.goto(asgi_server.url + "/redteam/leaderboard/")
    expect(page.get_by_test_id("redteam-transparency")).to_be_visible()
    assert_french(page, phrases, "the red-team board")
    context.close()
    assert violations == [], "\n".join(violations)
