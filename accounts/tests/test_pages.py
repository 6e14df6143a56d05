"""The signed-in visitor's pages: the personal board beside the public ranks, the download of
the account's data, and its deletion (the account and its addresses gone, the votes kept
without it)."""

import json

import pytest
from allauth.account.models import EmailAddress
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from accounts.selectors import personal_board
from arena.models import Battle, Vote
from ratings.models import LeaderboardSnapshot

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def account():
    user = User.objects.create_user(username="ada", email="ada@example.org")
    EmailAddress.objects.create(user=user, email="ada@example.org", verified=True, primary=True)
    return user


@pytest.fixture
def signed_in(client, account) -> Client:
    client.force_login(account)
    return client


def own_votes(make_vote, account, games):
    """Votes of ``account``: (model, model, winner) each."""
    votes = []
    for a, b, winner in games:
        vote = make_vote(a, b, winner)
        Vote.objects.filter(pk=vote.pk).update(account=account)
        votes.append(vote)
    return votes


def test_the_pages_ask_a_visitor_to_sign_in_first(client):
    for path in ("/account", "/account/data.json", "/account/delete"):
        answer = client.get(path)
        assert answer.status_code == 302
        assert answer["Location"] == f"/account/login/?next={path}"


def test_the_board_ranks_the_models_by_the_visitors_votes_beside_their_public_rank(
    signed_in, account, rated_models, make_vote
):
    alpha, beta, gamma = rated_models
    call_command("rate_snapshot", verbosity=0)  # alpha 1st, beta 2nd, gamma 3rd
    assert LeaderboardSnapshot.objects.exists()
    # This visitor disagrees with the crowd: gamma over alpha, twice, and over beta.
    own_votes(
        make_vote,
        account,
        [(gamma, alpha, "model_a"), (alpha, gamma, "model_b"), (beta, gamma, "model_b")],
    )
    page = signed_in.get("/account")
    assert page.status_code == 200
    board = page.context["board"]
    assert [row.model for row in board.rows] == ["gamma", "beta", "alpha"]
    assert [row.public.rank for row in board.rows] == [3, 2, 1]
    assert board.votes == 3 and board.counted == 3
    html = page.content.decode()
    assert "3 votes cast from this account." in html
    assert "Method: a Bradley-Terry fit of your 3 votes on anonymous battles" in html
    assert html.index("Gamma Small") < html.index("Beta Medium") < html.index("Alpha Large")


def test_the_board_leaves_out_named_and_environment_battles_but_counts_every_vote(
    account, make_vote, rated_models
):
    alpha, beta, _ = rated_models
    own_votes(make_vote, account, [(alpha, beta, "model_a")])
    (named,) = own_votes(make_vote, account, [(alpha, beta, "model_b")])
    Battle.objects.filter(pk=named.battle_id).update(mode=Battle.Mode.NAMED)
    board = personal_board(account_id=account.pk)
    assert board.votes == 2 and board.counted == 1
    assert [row.model for row in board.rows] == ["alpha", "beta"]
    assert all(row.public is None for row in board.rows)  # no snapshot yet


def test_a_board_without_votes_says_how_to_start_one(signed_in):
    page = signed_in.get("/account").content.decode()
    assert 'data-testid="board-empty"' in page and "0 votes cast from this account." in page


def test_the_download_holds_the_account_its_addresses_and_its_votes(
    signed_in, account, make_vote, rated_models
):
    alpha, beta, _ = rated_models
    SocialAccount.objects.create(user=account, provider="github", uid="4242")
    (vote,) = own_votes(make_vote, account, [(alpha, beta, "tie")])
    answer = signed_in.get("/account/data.json")
    assert answer.status_code == 200
    assert answer["Content-Disposition"].startswith('attachment; filename="arena-account-')
    assert answer["Cache-Control"] == "no-store"
    data = json.loads(answer.content)
    assert data["email"] == "ada@example.org"
    assert data["date_joined"] == account.date_joined.isoformat()
    assert data["email_addresses"] == [
        {"email": "ada@example.org", "verified": True, "primary": True}
    ]
    assert [(s["provider"], s["uid"]) for s in data["social_accounts"]] == [("github", "4242")]
    assert data["votes"] == [
        {
            "vote_id": vote.pk,
            "battle_id": str(vote.battle_id),
            "battle_mode": "anonymous",
            "battle_source": "pool",
            "model_a": "alpha",
            "model_b": "beta",
            "model_a_name": "Alpha Large",
            "model_b_name": "Beta Medium",
            "winner": "tie",
            "created_at": Vote.objects.get(pk=vote.pk).created_at.isoformat(),
        }
    ]
    assert len(data["votes"]) == 1  # another visitor's votes are not there (rated_models' 60)


def test_the_delete_page_says_the_votes_stay_as_anonymous_votes(
    signed_in, account, make_vote, rated_models
):
    alpha, beta, _ = rated_models
    own_votes(make_vote, account, [(alpha, beta, "model_a"), (beta, alpha, "model_a")])
    page = signed_in.get("/account/delete").content.decode()
    assert "Your 2 votes stay in the arena as anonymous votes." in page
    assert 'data-testid="confirm-delete"' in page and "csrfmiddlewaretoken" in page
    assert User.objects.filter(pk=account.pk).exists()  # a GET deletes nothing


def test_deleting_the_account_removes_it_and_its_addresses_and_keeps_its_votes_anonymous(
    account, make_vote, rated_models
):
    alpha, beta, _ = rated_models
    SocialAccount.objects.create(user=account, provider="github", uid="4242")
    votes = own_votes(make_vote, account, [(alpha, beta, "model_a"), (beta, alpha, "tie")])
    client = Client(enforce_csrf_checks=True)
    client.force_login(account)
    assert client.post("/account/delete").status_code == 403  # no CSRF token
    assert User.objects.filter(pk=account.pk).exists()
    page = client.get("/account/delete")
    token = page.context["csrf_token"]
    answer = client.post("/account/delete", {"csrfmiddlewaretoken": str(token)})
    assert answer.status_code == 302 and answer["Location"] == "/"
    assert not User.objects.filter(pk=account.pk).exists()
    assert not EmailAddress.objects.filter(email="ada@example.org").exists()
    assert not SocialAccount.objects.exists()
    kept = Vote.objects.filter(pk__in=[v.pk for v in votes]).order_by("id")
    assert [(v.account_id, v.winner) for v in kept] == [(None, "model_a"), (None, "tie")]
    assert Vote.objects.count() == 62  # rated_models' 60 and these two
    # Signed out, with the message on the next page.
    battle = client.get("/")
    assert "Your account is deleted." in battle.content.decode()
    assert client.get("/account").status_code == 302


def test_a_staff_account_is_not_deleted_from_the_visitors_page(client):
    staff = User.objects.create_user(username="root", email="root@example.org", is_staff=True)
    client.force_login(staff)
    assert "deleted in the admin" in client.get("/account/delete").content.decode()
    assert client.post("/account/delete").status_code == 403
    assert User.objects.filter(pk=staff.pk).exists()
