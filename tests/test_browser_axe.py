"""axe-core on every page state a visitor meets, at a desktop's size and a phone's.

A page that scrolls sideways fails too, and so does a serious or critical violation (axe-core's own rating: what keeps a screen-reader or keyboard
user out) fails the test, naming the rule and the element. Each state is also kept as a
screenshot under var/screenshots/ for whoever reads a failure.
"""

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from ratings import services
from tests.helpers import axe_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parent.parent / "var" / "screenshots" / "axe"


def check(page, state: str) -> list[str]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{state}-{page.size_name}.png"), full_page=True)
    found = [f"{state}: {line}" for line in axe_violations(page)]
    if page.evaluate("document.scrollingElement.scrollWidth > window.innerWidth"):
        found.append(f"{state}: the page scrolls sideways")
    return found


def test_the_battle_page_has_no_serious_violation_from_terms_to_reveal(asgi_server, sized_page):
    call_command("load_demo", verbosity=0)
    page = sized_page
    page.goto(asgi_server.url + "/")
    expect(page.get_by_test_id("terms-accept")).to_be_visible()
    found = check(page, "terms")
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-b")).not_to_be_empty()
    found += check(page, "battle")
    page.get_by_test_id("react-up-a").click()
    expect(page.get_by_test_id("reaction-tag-a-useful")).to_be_visible()
    found += check(page, "reactions")
    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("next-battle")).to_be_visible()
    page.get_by_test_id("share-make").click()
    expect(page.get_by_test_id("share-url")).to_have_value(re.compile(r"/s/"))
    found += check(page, "reveal")
    page.goto(page.get_by_test_id("share-url").input_value())
    found += check(page, "share")
    page.goto(asgi_server.url + "/?mode=live")  # no live model in the demo: the note says so
    found += check(page, "live-off")
    assert not found, "\n".join(found)


def test_the_leaderboard_transparency_and_about_pages_have_no_serious_violation(
    asgi_server, sized_page, rated_models, settings
):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    services.snapshot_refresh()
    page = sized_page
    found: list[str] = []
    for state, path in (
        ("leaderboard", "/leaderboard"),
        ("transparency", "/transparency"),
        ("about", "/about"),
        ("model", f"/models/{rated_models[0].slug}"),
        ("not-found", "/no-such-page"),
    ):
        page.goto(asgi_server.url + path)
        found += check(page, state)
    assert not found, "\n".join(found)


def test_the_account_pages_have_no_serious_violation(asgi_server, sized_page, make_vote, settings):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from arena.models import Vote
    from arena.tests.factories import ArenaModelFactory

    page = sized_page
    found = []
    for path, state in (
        ("/account/login/", "sign-in"),
        ("/account/login/code/", "sign-in-code"),
        ("/account/signup/", "sign-up"),
    ):
        page.goto(asgi_server.url + path)
        found += check(page, state)
    account = get_user_model().objects.create_user(username="ada", email="ada@example.org")
    vote = make_vote(ArenaModelFactory(), ArenaModelFactory(), "model_a")
    Vote.objects.filter(pk=vote.pk).update(account=account)
    client = Client()
    client.force_login(account)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": asgi_server.url}]
    )
    for path, state in (("/account", "account"), ("/account/delete", "account-delete")):
        page.goto(asgi_server.url + path)
        found += check(page, state)
    expect(page.get_by_test_id("confirm-delete")).to_be_visible()
    assert not found, "\n".join(found)
