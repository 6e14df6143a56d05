"""A signed-in visitor's vote records the account, over HTTP and over the battle socket; a
visitor without one votes as before; a deleted account's votes stay, without it."""

import json

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client

from arena.api import VOTER_SESSION_KEY, session_account_id
from arena.models import Vote
from arena.selectors import account_votes, vote_accounts
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import pool_of
from arena.tests.test_consumer_vote import ready_battle, socket, vote

User = get_user_model()


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def signed_in_visitor(email: str = "ada@example.org") -> tuple[Client, object]:
    """A client signed in to a new account, that has opened the battle page and accepted the
    terms."""
    account = User.objects.create_user(username=email, email=email, password="a long passphrase")
    client = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Test")
    client.force_login(account)
    client.get("/")
    terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
    return client, account


def pool_vote(client, winner: str = "model_a") -> Vote:
    battle = post_json(client, "/api/battles", {})
    assert battle.status_code == 201, battle.content
    battle_id = battle.json()["id"]
    voted = post_json(client, f"/api/battles/{battle_id}/vote", {"winner": winner})
    assert voted.status_code == 201, voted.content
    return Vote.objects.get(battle_id=battle_id)


@pytest.mark.django_db
def test_an_http_vote_without_an_account_records_none(visitor):
    pool_of(n_models=2, n_prompts=1)
    assert pool_vote(visitor).account_id is None


@pytest.mark.django_db
def test_an_http_vote_of_a_signed_in_visitor_records_the_account():
    pool_of(n_models=2, n_prompts=1)
    client, account = signed_in_visitor()
    vote = pool_vote(client, "model_b")
    assert vote.account_id == account.pk and vote.winner == "model_b"
    assert [v.vote_id for v in account_votes(account_id=account.pk)] == [vote.pk]


@pytest.mark.django_db
def test_the_service_records_the_account_it_is_given_and_none_by_default(visitor):
    _, account = signed_in_visitor()
    pool_of(n_models=2, n_prompts=2)
    ids = []
    for account_id in (account.pk, None):
        battle_id = post_json(visitor, "/api/battles", {}).json()["id"]
        recorded = vote_record(
            battle_id=battle_id,
            session_key=visitor.session.session_key,
            voter_id=visitor.session[VOTER_SESSION_KEY],
            winner="tie",
            account_id=account_id,
        )
        ids.append(recorded.vote.pk)
    assert list(Vote.objects.filter(pk__in=ids).order_by("id").values_list("account_id")) == [
        (account.pk,),
        (None,),
    ]


@pytest.mark.django_db
def test_vote_accounts_gives_each_votes_account_and_join_time_and_leaves_out_the_rest(visitor):
    pool_of(n_models=2, n_prompts=2)
    client, account = signed_in_visitor()
    with_account = pool_vote(client)
    without = pool_vote(visitor)
    found = vote_accounts(vote_ids=[with_account.pk, without.pk, 10**9])
    assert set(found) == {with_account.pk}
    assert found[with_account.pk].account_id == account.pk
    assert found[with_account.pk].joined == account.date_joined
    assert vote_accounts(vote_ids=[]) == {}


@pytest.mark.django_db
def test_a_deleted_accounts_votes_stay_with_no_account():
    pool_of(n_models=2, n_prompts=1)
    client, account = signed_in_visitor()
    vote = pool_vote(client)
    account.delete()
    vote.refresh_from_db()
    assert vote.account_id is None and vote.winner == "model_a"
    assert vote_accounts(vote_ids=[vote.pk]) == {}


@pytest.mark.django_db
def test_a_session_whose_password_changed_since_is_no_account_and_is_left_as_it_was():
    client, account = signed_in_visitor()
    key = client.session.session_key
    assert session_account_id(SessionStore(key)) == account.pk
    account.set_password("another long passphrase")
    account.save()
    store = SessionStore(key)
    assert session_account_id(store) is None
    assert SessionStore(key).get(VOTER_SESSION_KEY)  # not flushed, as get_user would
    assert session_account_id(SessionStore()) is None


def _signed_in_session(voter_id: str) -> tuple[str, int]:
    account = User.objects.create_user(username=voter_id, email=f"{voter_id}@example.org")
    client = Client()
    client.force_login(account)
    store = SessionStore(client.session.session_key)
    store[VOTER_SESSION_KEY] = voter_id
    store.save()
    terms_accept(voter_id=voter_id)
    return store.session_key, account.pk


def _anonymous_session(voter_id: str) -> str:
    store = SessionStore()
    store[VOTER_SESSION_KEY] = voter_id
    store.create()
    terms_accept(voter_id=voter_id)
    return store.session_key


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("upstream_clients")
async def test_a_socket_vote_of_a_signed_in_visitor_records_the_account(fake_upstream, live_models):
    key, account_id = await database_sync_to_async(_signed_in_session)("voter-signed")
    comm = await socket(key)
    battle = await ready_battle(comm, fake_upstream, live_models)
    assert (await vote(comm, battle["id"], "model_b"))["type"] == "voted"
    row = await database_sync_to_async(Vote.objects.get)(battle_id=battle["id"])
    assert row.account_id == account_id and row.voter_id == "voter-signed"
    await comm.disconnect()


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("upstream_clients")
async def test_a_socket_vote_without_an_account_records_none(fake_upstream, live_models):
    key = await database_sync_to_async(_anonymous_session)("voter-anon")
    comm = await socket(key)
    battle = await ready_battle(comm, fake_upstream, live_models)
    assert (await vote(comm, battle["id"]))["type"] == "voted"
    row = await database_sync_to_async(Vote.objects.get)(battle_id=battle["id"])
    assert row.account_id is None and row.voter_id == "voter-anon"
    await comm.disconnect()
