"""End to end in Chromium: the language switcher in the header, on a phone and on a laptop."""

import re

import pytest
from playwright.sync_api import expect

from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory
from tests.helpers import csp_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIEWPORTS = [{"width": 390, "height": 844}, {"width": 1366, "height": 900}]


@pytest.fixture
def pool_battle():
    prompt = PromptFactory(turns=["Say hello."])
    for model in (ArenaModelFactory(), ArenaModelFactory()):
        CompletionFactory(prompt=prompt, model=model, turns=["Hello."])


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=lambda v: f"{v['width']}x{v['height']}")
def test_the_switcher_turns_the_site_french_and_remembers_it(
    asgi_server, browser, pool_battle, viewport
):
    context = browser.new_context(viewport=viewport)
    violations = csp_violations(context)
    page = context.new_page()
    page.goto(asgi_server.url + "/about")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.get_by_role("heading", level=1)).to_have_text("About this arena")
    switcher = page.get_by_test_id("language-select")
    # The script took over the form: a choice applies at once, so the button is hidden.
    expect(page.get_by_test_id("language-apply")).to_be_hidden()
    box = switcher.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"]

    switcher.select_option("fr")
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    assert re.search(r"/about$", page.url)
    expect(page.get_by_role("heading", level=1)).to_have_text("À propos de cette arène")
    expect(page.get_by_test_id("language-select")).to_have_value("fr")
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    assert cookies["django_language"] == "fr"
    assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport["width"]

    # The next page is French too, and so are its scripts' strings (the catalogue loaded).
    page.goto(asgi_server.url + "/")
    expect(page.get_by_role("navigation").get_by_role("link", name="Classement")).to_be_visible()
    assert page.evaluate("() => window.gettext('Turn %(number)s')") == "Tour %(number)s"
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-b")).to_have_text(re.compile(r"\S"), use_inner_text=True)

    page.get_by_test_id("language-select").select_option("en")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.get_by_role("navigation").get_by_role("link", name="Leaderboard")).to_be_visible()
    context.close()
    assert violations == [], "\n".join(violations)


def test_without_javascript_the_switchers_button_changes_the_language(asgi_server, browser):
    context = browser.new_context(viewport=VIEWPORTS[0], java_script_enabled=False)
    page = context.new_page()
    page.goto(asgi_server.url + "/about")
    page.get_by_test_id("language-select").select_option("fr")
    expect(page.locator("html")).to_have_attribute("lang", "en")  # nothing submits by itself
    page.get_by_test_id("language-apply").click()
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    expect(page.get_by_role("heading", level=1)).to_have_text("À propos de cette arène")
    context.close()
