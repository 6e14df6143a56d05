"""The battle socket's ``vote`` frame: the HTTP vote's checks and answer, one request less.

Driven through Channels' WebsocketCommunicator against the loopback fake upstream; the HTTP
side through Django's test client on the same session, so both paths are held to one another.
"""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client

from arena.models import Vote
from arena.services.terms import terms_accept
from arena.services.vote_guards import CHALLENGE_SESSION_KEY
from arena.tests.fake_openai import FakeModel
from arena.tests.test_consumer_live import frames_until, serve
from config.asgi import application

pytestmark = [
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("upstream_clients"),
]

USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) Socket"


def _session(*, terms: bool = True, voter_id: str = "voter-ws") -> str:
    store = SessionStore()
    store["arena_voter_id"] = voter_id
    store.create()
    if terms:
        terms_accept(voter_id=voter_id)
    return store.session_key


async def new_session(**kwargs) -> str:
    return await database_sync_to_async(_session)(**kwargs)


async def socket(session_key: str, address: str | None = None, language: str = ""):
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={session_key}".encode()),
        (b"user-agent", USER_AGENT.encode()),
    ]
    if language:
        headers.append((b"accept-language", language.encode()))
    comm = WebsocketCommunicator(application, "/ws/battle", headers=headers)
    if address:
        comm.scope["client"] = (address, 40000)
    connected, _ = await comm.connect()
    assert connected
    return comm


async def ready_battle(comm, fake_upstream, live_models) -> dict:
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=["Alpha ", "one"]),
        m2=FakeModel(tokens=["Beta ", "two"]),
    )
    await comm.send_json_to({"type": "start", "prompt": "Say something"})
    battle = (await frames_until(comm, "turn_end"))[-1]["battle"]
    assert battle["state"] == "ready" and battle["votable"] is True
    assert battle["models"] is None  # anonymous until the vote
    return battle


async def vote(comm, battle_id: str, winner: str = "model_a", **extra) -> dict:
    await comm.send_json_to({"type": "vote", "battle_id": battle_id, "winner": winner, **extra})
    return json.loads((await comm.receive_output(10))["text"])


def http_client(session_key: str, address: str = "127.0.0.1") -> Client:
    client = Client(REMOTE_ADDR=address)
    client.cookies["sessionid"] = session_key
    return client


async def votes_of(battle_id: str) -> list[Vote]:
    return await database_sync_to_async(lambda: list(Vote.objects.filter(battle_id=battle_id)))()


def assert_refused(frame: dict, code: str, battle_id: str) -> None:
    assert frame["type"] == "error", frame
    assert frame["code"] == code, frame
    assert frame["reply_to"] == "vote" and frame["battle_id"] == battle_id
    assert frame["message"]


async def test_a_vote_frame_records_the_vote_and_answers_the_battle_as_the_http_vote_does(
    fake_upstream, live_models
):
    key = await new_session()
    comm = await socket(key, language="fr")
    battle = await ready_battle(comm, fake_upstream, live_models)
    answer = await vote(comm, battle["id"], "model_b", ran={"a": True, "b": False})
    assert answer["type"] == "voted"
    voted = answer["battle"]
    assert voted["state"] == "voted" and voted["votable"] is False
    names = {voted["models"]["a"]["name"], voted["models"]["b"]["name"]}
    assert names == {"Zephyrine Turbo 1", "Zephyrine Turbo 2"}
    (row,) = await votes_of(battle["id"])
    assert row.winner == "model_b" and row.voter_id == "voter-ws"
    assert row.interface_language == "fr"  # the socket's language, as LANGUAGE_CODE over HTTP
    assert row.user_agent_class == "browser"  # the handshake's User-Agent
    detail = await database_sync_to_async(
        lambda: http_client(key).get(f"/api/battles/{battle['id']}").json()
    )()
    assert voted == detail
    await comm.disconnect()


async def test_a_vote_frame_on_a_voted_battle_is_already_voted_and_records_nothing_more(
    fake_upstream, live_models
):
    comm = await socket(await new_session())
    battle = await ready_battle(comm, fake_upstream, live_models)
    assert (await vote(comm, battle["id"]))["type"] == "voted"
    assert_refused(await vote(comm, battle["id"], "tie"), "already_voted", battle["id"])
    assert [v.winner for v in await votes_of(battle["id"])] == ["model_a"]
    await comm.disconnect()


async def test_terms_accepted_after_the_socket_opened_count_for_its_next_vote(
    fake_upstream, live_models
):
    key = await new_session(terms=False, voter_id="voter-late")
    comm = await socket(key)
    battle = await ready_battle(comm, fake_upstream, live_models)
    refused = await vote(comm, battle["id"])
    assert_refused(refused, "terms_required", battle["id"])
    assert refused["field"] == "terms"
    await database_sync_to_async(terms_accept)(voter_id="voter-late")
    assert (await vote(comm, battle["id"]))["type"] == "voted"
    await comm.disconnect()


async def test_a_challenge_solved_after_the_socket_opened_counts_for_its_next_vote(
    settings, fake_upstream, live_models
):
    settings.ARENA_CHALLENGE = True
    key = await new_session()
    comm = await socket(key)
    battle = await ready_battle(comm, fake_upstream, live_models)
    assert_refused(await vote(comm, battle["id"]), "challenge_required", battle["id"])
    assert await votes_of(battle["id"]) == []

    def solve() -> None:  # what POST /api/challenge/verify leaves in the session
        store = SessionStore(key)
        store[CHALLENGE_SESSION_KEY] = True
        store.save()

    await database_sync_to_async(solve)()
    assert (await vote(comm, battle["id"]))["type"] == "voted"
    await comm.disconnect()


async def test_a_battle_still_streaming_is_not_votable(fake_upstream, live_models):
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=["slow "] * 50, delay=0.05),
        m2=FakeModel(tokens=["slow "] * 50, delay=0.05),
    )
    comm = await socket(await new_session())
    await comm.send_json_to({"type": "start", "prompt": "Take your time"})
    start = (await frames_until(comm, "turn_start"))[-1]
    battle_id = start["battle"]["id"]
    await comm.send_json_to({"type": "vote", "battle_id": battle_id, "winner": "model_a"})
    frames = await frames_until(comm, "error")
    assert_refused(frames[-1], "not_votable", battle_id)
    await comm.send_json_to({"type": "stop"})
    await frames_until(comm, "turn_end")
    await comm.disconnect()


async def test_another_sessions_battle_is_not_found_over_the_socket(fake_upstream, live_models):
    owner = await socket(await new_session(voter_id="voter-owner"))
    battle = await ready_battle(owner, fake_upstream, live_models)
    stranger = await socket(await new_session(voter_id="voter-stranger"))
    assert_refused(await vote(stranger, battle["id"]), "not_found", battle["id"])
    assert await votes_of(battle["id"]) == []
    await owner.disconnect()
    await stranger.disconnect()


async def test_a_winner_that_is_none_of_the_four_is_refused_naming_it(fake_upstream, live_models):
    comm = await socket(await new_session())
    battle = await ready_battle(comm, fake_upstream, live_models)
    refused = await vote(comm, battle["id"], "model_c")
    assert_refused(refused, "invalid", battle["id"])
    assert refused["field"] == "winner"
    await comm.disconnect()


async def test_the_daily_cap_refuses_a_socket_vote_and_a_refused_vote_gives_its_place_back(
    settings, fake_upstream, live_models
):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 1
    key = await new_session(terms=False, voter_id="voter-capped")
    comm = await socket(key)
    first = await ready_battle(comm, fake_upstream, live_models)
    # Refused after the caps were taken (terms_required): they are released, so the one vote
    # of the day is still there to cast.
    assert_refused(await vote(comm, first["id"]), "terms_required", first["id"])
    await database_sync_to_async(terms_accept)(voter_id="voter-capped")
    assert (await vote(comm, first["id"]))["type"] == "voted"
    second = await ready_battle(comm, fake_upstream, live_models)
    assert_refused(await vote(comm, second["id"]), "vote_cap", second["id"])
    assert await votes_of(second["id"]) == []
    await comm.disconnect()


@pytest.mark.postgres
async def test_a_listener_failing_after_commit_leaves_a_socket_vote_voted_and_counted(
    settings, fake_upstream, live_models, broken_vote_listener
):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 1
    comm = await socket(await new_session())
    first = await ready_battle(comm, fake_upstream, live_models)
    answer = await vote(comm, first["id"])
    assert answer["type"] == "voted", answer
    assert [v.winner for v in await votes_of(first["id"])] == ["model_a"]
    assert broken_vote_listener()
    second = await ready_battle(comm, fake_upstream, live_models)
    assert_refused(await vote(comm, second["id"]), "vote_cap", second["id"])
    await comm.disconnect()


async def test_the_per_address_rate_limit_counts_socket_and_http_votes_together(
    settings, fake_upstream, live_models
):
    settings.RATELIMIT_ENABLE = True
    settings.ARENA_RATELIMIT_VOTES = "2/m"
    settings.ARENA_RATELIMIT_LIVE = ""
    address = "198.51.100.23"
    key = await new_session()
    comm = await socket(key, address=address)
    battle = await ready_battle(comm, fake_upstream, live_models)
    client = http_client(key, address)
    missing = "00000000-0000-4000-8000-000000000000"

    def http_vote() -> int:
        return client.post(
            f"/api/battles/{missing}/vote", {"winner": "tie"}, content_type="application/json"
        ).status_code

    assert await database_sync_to_async(http_vote)() == 404  # counted, though refused
    assert (await vote(comm, battle["id"]))["type"] == "voted"  # the second of two
    assert_refused(await vote(comm, battle["id"]), "rate_limited", battle["id"])
    assert await database_sync_to_async(http_vote)() == 429  # the socket's votes counted too
    # Another address has its own count.
    other = await socket(await new_session(voter_id="voter-other"), address="198.51.100.99")
    other_battle = await ready_battle(other, fake_upstream, live_models)
    assert (await vote(other, other_battle["id"]))["type"] == "voted"
    await comm.disconnect()
    await other.disconnect()
