"""End to end in Chromium, on a laptop and on a touch phone, in English and in French: a visitor
signs in with a code mailed to them, votes in a pool battle, finds the vote on their own
leaderboard beside the public ranks, downloads their data and deletes the account, whose vote
stays without it."""

import json
import re

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import call_command
from playwright.sync_api import Page, expect

from accounts.tests.mail import mailed_code
from arena.models import Battle, Vote
from arena.tests.factories import CompletionFactory, PromptFactory
from tests.helpers import SIZES, csp_violations
from tests.test_browser_french import assert_french, english_phrases

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

User = get_user_model()
EMAIL = "ada@example.org"
WORDS = {
    "en": {"deleted": "Your account is deleted.", "kept": "stays in the arena as an anonymous"},
    "fr": {"deleted": "Votre compte est supprimé.", "kept": "reste dans l’arène comme un vote"},
}


def fits_the_screen(page: Page) -> None:
    """Nothing wider than the viewport: the page never scrolls sideways."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], (page.url, width)


@pytest.mark.parametrize("language", ["en", "fr"])
@pytest.mark.parametrize("size", sorted(SIZES))
def test_a_visitor_signs_in_by_code_votes_sees_their_board_downloads_and_deletes(
    asgi_server, browser, rated_models, size, language
):
    # A pool prompt all three models answered, and a public leaderboard to compare with.
    prompt = PromptFactory(turns=["Name a prime number."])
    for model in rated_models:
        CompletionFactory(prompt=prompt, model=model, turns=[f"{model.display_name} says 7."])
    call_command("rate_snapshot", verbosity=0)
    account = User.objects.create_user(username=EMAIL, email=EMAIL)
    EmailAddress.objects.create(user=account, email=EMAIL, verified=True, primary=True)
    phrases = english_phrases() if language == "fr" else set()

    context = browser.new_context(**SIZES[size])
    context.add_cookies([{"name": "django_language", "value": language, "url": asgi_server.url}])
    violations = csp_violations(context)
    page = context.new_page()

    # The header's discreet link, on the screen at either size, once the terms are accepted.
    page.goto(asgi_server.url + "/")
    expect(page.locator("html")).to_have_attribute("lang", language)
    page.get_by_test_id("terms-accept").click()
    link = page.get_by_test_id("nav-account")
    expect(link).to_be_visible()
    box = link.bounding_box()
    assert box is not None and box["x"] + box["width"] <= page.viewport_size["width"]
    link.click()

    # allauth's sign-in, in the site's layout: a code mailed, then entered.
    expect(page).to_have_url(re.compile(r"/account/login/\?next=/$"))
    expect(page.locator(".site-header")).to_be_visible()
    fits_the_screen(page)
    page.locator("main a[href^='/account/login/code/']").click()
    page.locator("main input[name=email]").fill(EMAIL)
    page.locator("main form button[type=submit]").first.click()
    expect(page).to_have_url(re.compile(r"/account/login/code/confirm/"))
    fits_the_screen(page)
    assert len(mail.outbox) == 1
    page.locator("main input[name=code]").fill(mailed_code(EMAIL))
    page.locator("main form button[type=submit]").first.click()
    expect(page).not_to_have_url(re.compile(r"/login/"))

    # Back on the battle page, signed in (the terms stay accepted): the vote is the same as
    # without an account.
    page.goto(asgi_server.url + "/")
    expect(page.get_by_test_id("nav-account")).to_have_attribute("href", "/account")
    expect(page.get_by_test_id("vote-a")).to_be_enabled()
    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("verdict")).not_to_be_empty()  # the names revealed
    vote = Vote.objects.exclude(battle__source=Battle.Source.IMPORT).filter(account=account).get()
    winner = vote.battle.model_a

    # The personal board: the vote's two models, the winner first, with their public ranks.
    page.get_by_test_id("nav-account").click()
    expect(page.get_by_test_id("account-page")).to_be_visible()
    rows = page.get_by_test_id("personal-board").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-model", winner.slug)
    expect(rows.first.get_by_test_id("public-rank")).to_have_text(re.compile(r"^[123]$"))
    expect(page.get_by_test_id("vote-count")).to_contain_text("1")
    expect(page.get_by_test_id("board-method")).to_contain_text("Bradley-Terry")
    fits_the_screen(page)
    if language == "fr":
        assert_french(page, phrases, "the personal board")

    # The data, as a file.
    with page.expect_download() as download:
        page.get_by_test_id("download-data").click()
    data = json.loads(open(download.value.path(), encoding="utf-8").read())
    assert data["email"] == EMAIL
    assert [(v["battle_id"], v["winner"]) for v in data["votes"]] == [
        (str(vote.battle_id), "model_a")
    ]

    # The deletion: the page says the vote stays, anonymous; the account goes.
    page.get_by_test_id("delete-account").click()
    expect(page.get_by_test_id("votes-kept")).to_contain_text(WORDS[language]["kept"])
    fits_the_screen(page)
    if language == "fr":
        assert_french(page, phrases, "the deletion")
    page.get_by_test_id("confirm-delete").click()
    expect(page.get_by_test_id("messages")).to_contain_text(WORDS[language]["deleted"])
    expect(page.get_by_test_id("nav-account")).to_have_attribute(
        "href", re.compile(r"^/account/login/")
    )
    assert not User.objects.filter(pk=account.pk).exists()
    assert not EmailAddress.objects.filter(email=EMAIL).exists()
    vote.refresh_from_db()
    assert vote.account_id is None and vote.winner == "model_a"

    context.close()
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)
