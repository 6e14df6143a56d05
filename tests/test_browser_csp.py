"""In Chromium: the pages work under the Content-Security-Policy and the browser reports no
violation of it (a blocked inline style or script shows up as a console error)."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory
from config.settings import base
from ratings import services
from tests.helpers import csp_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ANSWER = """## A table

| left | centre | right |
|:-----|:------:|------:|
| 1    | 2      | 3     |

Some `code` and a [link](https://example.org).
"""


def test_battle_leaderboard_about_and_admin_pages_raise_no_csp_violation(
    asgi_server, page, rated_models, settings
):
    # The exact policy every environment serves: the test settings add nothing to it (no
    # 'unsafe-eval', so browser tests wait with locator assertions: page.wait_for_function
    # polls a string predicate with eval inside the page, which the policy refuses).
    assert settings.CONTENT_SECURITY_POLICY == base.CONTENT_SECURITY_POLICY
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    services.snapshot_refresh()
    prompt = PromptFactory(turns=["Show me a table."])
    for model in (ArenaModelFactory(), ArenaModelFactory()):
        CompletionFactory(prompt=prompt, model=model, turns=[ANSWER])
    get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    violations = csp_violations(page)

    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    # markdown-it and DOMPurify ran (scripts allowed) and rendered the aligned table
    page.get_by_test_id("response-b").locator("table th").first.wait_for()
    centre = page.get_by_test_id("response-b").locator("td.align-center")
    assert centre.evaluate("el => getComputedStyle(el).textAlign") == "center"
    page.get_by_test_id("vote-a").click()
    # the vote's fetch went through (connect-src) and the names were revealed
    page.get_by_test_id("next-battle").wait_for()
    assert page.get_by_test_id("model-name-a").inner_text() != "Model A"

    page.goto(asgi_server.url + "/leaderboard")
    assert page.get_by_test_id("winrate-heatmap").locator("svg text").first.is_visible()
    page.goto(asgi_server.url + "/about")
    page.goto(asgi_server.url + "/transparency")
    assert page.get_by_test_id("models-served").is_visible()

    page.goto(asgi_server.url + "/" + settings.ADMIN_URL)
    page.fill("#id_username", "staff")
    page.fill("#id_password", "pw-123456!")
    page.click("input[type=submit]")
    page.wait_for_url("**/" + settings.ADMIN_URL)
    page.goto(asgi_server.url + reverse("admin:ratings_leaderboardsnapshot_changelist"))
    assert page.get_by_test_id("recompute-now").is_visible()
    page.goto(asgi_server.url + reverse("admin:arena_arenamodel_changelist"))
    page.goto(asgi_server.url + reverse("admin:arena_arenamodel_add"))
    assert page.locator("#arenamodel_form").is_visible()

    assert violations == [], "\n".join(violations)


def test_the_browser_fixtures_see_a_violation(asgi_server, browser):
    """The guard every browser test runs under (conftest.py's page fixture) notices a blocked
    inline script and a string evaluated as code, and names the directive."""
    context = browser.new_context()
    try:
        violations = csp_violations(context)
        page = context.new_page()
        page.goto(asgi_server.url + "/about")
        page.evaluate(  # an inline script, as a page's own code might insert one
            "() => { const s = document.createElement('script');"
            " s.textContent = 'window.__inline = 1'; document.head.append(s); }"
        )
        # A string run as code from the page's own tasks, as page.wait_for_function("...")
        # polls its predicate (what DevTools evaluates directly, page.evaluate, is not checked).
        page.evaluate("() => { setTimeout('window.__evaled = 1', 0); }")
        wanted = ("script-src-elem blocked inline", "script-src blocked eval")
        deadline = time.monotonic() + 10  # the reports arrive as console messages, a bit later
        while not all(w in "\n".join(violations) for w in wanted) and time.monotonic() < deadline:
            page.wait_for_timeout(50)
        evaluated = {
            name: page.evaluate(f"typeof window.__{name}") for name in ("inline", "evaled")
        }
    finally:
        context.close()
    for reported in wanted:
        assert reported in "\n".join(violations)
    assert evaluated == {"inline": "undefined", "evaled": "undefined"}
