"""Signing up and in through django-allauth's pages with the test client: a code mailed to
confirm a new account's address, a code mailed to sign in, a password; the nav's link."""

import pytest
from allauth.account.models import EmailAddress
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from accounts.tests.mail import mailed_code

pytestmark = pytest.mark.django_db

User = get_user_model()


def account_with_email(email: str, password: str | None = None):
    user = User.objects.create_user(username=email, email=email, password=password)
    EmailAddress.objects.create(user=user, email=email, verified=True, primary=True)
    return user


def signed_in_as(client: Client) -> str | None:
    page = client.get("/account")
    if page.status_code != 200:
        return None
    return page.context["user"].email


def test_signing_up_mails_a_code_that_confirms_the_address_and_signs_in(client):
    page = client.get("/account/signup/")
    assert page.status_code == 200 and b'name="email"' in page.content
    assert "Password (optional)" in page.content.decode()
    sent = client.post("/account/signup/", {"email": "new@example.org", "password1": ""})
    assert sent.status_code == 302, sent.content
    assert EmailAddress.objects.get(email="new@example.org").verified is False
    assert signed_in_as(client) is None  # not before the code
    confirmed = client.post(sent["Location"], {"code": mailed_code("new@example.org")})
    assert confirmed.status_code == 302
    assert EmailAddress.objects.get(email="new@example.org").verified is True
    assert signed_in_as(client) == "new@example.org"
    # No password was chosen: signing in again takes a code.
    assert not User.objects.get(email="new@example.org").has_usable_password()


def test_signing_in_by_code_mails_a_code_and_the_code_signs_in(client):
    account_with_email("ada@example.org")
    requested = client.post("/account/login/code/", {"email": "ada@example.org"})
    assert requested.status_code == 302
    assert requested["Location"] == "/account/login/code/confirm/"
    assert len(mail.outbox) == 1 and "[Arena]" in mail.outbox[0].subject
    wrong = client.post(requested["Location"], {"code": "BCDF-GHJK"})
    assert wrong.status_code == 200 and signed_in_as(client) is None
    right = client.post(requested["Location"], {"code": mailed_code("ada@example.org")})
    assert right.status_code == 302 and right["Location"] == "/account"
    assert signed_in_as(client) == "ada@example.org"


def test_a_code_for_an_unknown_address_signs_nobody_in_and_says_nothing_of_it(client):
    requested = client.post("/account/login/code/", {"email": "nobody@example.org"})
    # The same answer as for a known address: whether an account exists is not told.
    assert requested.status_code == 302
    assert requested["Location"] == "/account/login/code/confirm/"
    assert User.objects.count() == 0


def test_signing_in_with_the_password_goes_back_to_the_page_named_next(client):
    account_with_email("bob@example.org", password="a long passphrase 7")
    signed = client.post(
        "/account/login/?next=/leaderboard",
        {"login": "bob@example.org", "password": "a long passphrase 7", "next": "/leaderboard"},
    )
    assert signed.status_code == 302 and signed["Location"] == "/leaderboard"
    assert signed_in_as(client) == "bob@example.org"


def test_a_wrong_password_is_counted_by_axes_under_the_email_not_under_no_name(client):
    account_with_email("fay@example.org", password="the right passphrase 9")
    answer = client.post("/account/login/", {"login": "fay@example.org", "password": "wrong"})
    assert answer.status_code == 200 and signed_in_as(client) is None
    assert list(AccessAttempt.objects.values_list("username", "failures_since_start")) == [
        ("fay@example.org", 1)
    ]


def test_the_nav_offers_sign_in_to_a_visitor_and_the_account_once_signed_in(client):
    battle = client.get("/").content.decode()
    assert 'href="/account/login/?next=/"' in battle and ">Sign in<" in battle
    client.force_login(account_with_email("cy@example.org"))
    battle = client.get("/").content.decode()
    assert 'href="/account" data-testid="nav-account"' in battle and ">Your account<" in battle


def test_the_sign_in_page_is_in_the_sites_layout_and_in_french_for_a_french_visitor(client):
    page = client.get("/account/login/", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert '<html lang="fr">' in page
    assert 'class="site-header"' in page and 'class="account-pages"' in page
    assert "Connexion" in page  # allauth's own French catalogue
    assert "Sign In" not in page


def test_signing_out_empties_the_session_and_comes_back_to_the_battle(client):
    client.force_login(account_with_email("dee@example.org"))
    assert client.get("/account/logout/").status_code == 200  # a confirmation, no sign-out
    assert signed_in_as(client) == "dee@example.org"
    out = client.post("/account/logout/")
    assert out.status_code == 302 and out["Location"] == "/"
    assert signed_in_as(client) is None


def test_repeated_code_requests_for_one_address_are_refused_by_allauths_rate_limit(client):
    account_with_email("eve@example.org")
    answers = [
        Client().post("/account/login/code/", {"email": "eve@example.org"}) for _ in range(5)
    ]
    # Three codes a minute per address (allauth's default, kept on); then the form says so.
    assert [a.status_code for a in answers] == [302, 302, 302, 200, 200]
    assert b"Too many" in answers[-1].content
    assert len(mail.outbox) == 3
