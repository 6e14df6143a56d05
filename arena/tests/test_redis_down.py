"""Redis down is a degraded site, not a 500.

With production's shape of cache and sessions (``arena.cache.FallbackRedisCache`` on a Redis of
the test's own, ``cached_db`` sessions, rate limits on), the test kills that Redis: the battle
page, the terms, a pool battle and its vote, and the websocket's handshake and a live battle
all still work; sessions come from the database; rate limits still hold, counted per process;
one warning is logged. Redis is then restarted on the same port and, without a restart of
anything, sessions and rate-limit counters are in Redis again. A handshake refused for its
Origin reaches neither Redis nor the database, so it logs nothing while Redis is down.
"""

import json
import logging
import socket

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.cached_db import SessionStore
from django.test import Client

from arena.api import VOTER_SESSION_KEY
from arena.models import Vote
from arena.services.terms import terms_accept
from arena.tests.factories import pool_of
from arena.tests.fake_openai import FakeModel
from arena.tests.redis_server import own_redis  # noqa: F401  (fixture)

SESSION_KEYS = "*django.contrib.sessions.cached_db*"
RATE_KEYS = "*rl:*"


@pytest.fixture
def production_cache(own_redis, settings, frozen_clock):  # noqa: F811
    settings.CACHES = {
        "default": {
            "BACKEND": "arena.cache.FallbackRedisCache",
            "LOCATION": own_redis.url,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
    settings.RATELIMIT_ENABLE = True
    # The wall clock stands still (frozen_clock), so no window ends inside the test.
    settings.ARENA_RATELIMIT_BATTLES = "3/d"
    settings.ARENA_RATELIMIT_VOTES = "100/d"
    settings.ARENA_RATELIMIT_LIVE = "1/d"
    return own_redis


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def redis_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "arena.cache" and r.levelno == logging.WARNING
    ]


@pytest.mark.django_db
def test_pages_terms_battles_and_votes_work_while_redis_is_down_and_limits_resume_after(
    production_cache, caplog
):
    redis_server = production_cache
    pool_of(n_models=3, n_prompts=4)
    visitor = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Test")
    assert visitor.get("/").status_code == 200
    session_key = visitor.session.session_key
    assert redis_server.keys(SESSION_KEYS), "the session is cached in Redis while it is up"

    redis_server.stop()
    caplog.set_level(logging.WARNING, logger="arena.cache")

    # The same visitor, their session read from the database.
    assert visitor.get("/").status_code == 200
    assert visitor.session.session_key == session_key
    accepted = post_json(visitor, "/api/terms", {"accept": True})
    assert accepted.status_code == 200, accepted.content
    created = post_json(visitor, "/api/battles", {})
    assert created.status_code == 201, created.content
    battle_id = created.json()["id"]
    assert visitor.get(f"/api/battles/{battle_id}").status_code == 200
    voted = post_json(visitor, f"/api/battles/{battle_id}/vote", {"winner": "model_a"})
    assert voted.status_code == 201, voted.content
    assert Vote.objects.get(battle_id=battle_id).winner == "model_a"
    # A new visitor gets a session too (in the database only).
    newcomer = Client()
    assert newcomer.get("/").status_code == 200
    assert newcomer.session.get(VOTER_SESSION_KEY)

    # Rate limits still hold, counted in this process: 3 battles a day, one used above.
    statuses = [post_json(visitor, "/api/battles", {}).status_code for _ in range(3)]
    assert statuses == [201, 201, 429]
    # Many failed commands, one warning.
    warnings = redis_warnings(caplog)
    assert len(warnings) == 1 and "Redis cache unreachable" in warnings[0]

    redis_server.start()  # same port, empty

    assert visitor.get("/").status_code == 200
    assert visitor.session.session_key == session_key
    assert redis_server.keys(SESSION_KEYS), "sessions are cached in Redis again"
    assert any("reachable again" in message for message in redis_warnings(caplog))
    # The limit is counted in Redis again: a fresh count there (the restarted Redis is empty).
    statuses = [post_json(visitor, "/api/battles", {}).status_code for _ in range(4)]
    assert statuses == [201, 201, 201, 429]
    assert redis_server.keys(RATE_KEYS), "the rate-limit counter lives in Redis"


def _new_session() -> str:
    store = SessionStore()
    store[VOTER_SESSION_KEY] = "voter-redis-down"
    store.create()
    terms_accept(voter_id="voter-redis-down")
    return str(store.session_key)


async def _frames_until(comm, kind: str) -> list[dict]:
    frames = []
    while True:
        frame = json.loads((await comm.receive_output(10))["text"])
        frames.append(frame)
        if frame["type"] in (kind, "error"):
            return frames


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("upstream_clients")
async def test_websocket_handshake_and_live_battle_work_while_redis_is_down(
    production_cache, fake_upstream, live_models
):
    from config.asgi import application

    for model in live_models:
        fake_upstream.models[model.upstream_model_id] = FakeModel(tokens=["Hello ", "there"])
    session_key = await database_sync_to_async(_new_session)()
    production_cache.stop()

    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={session_key}".encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/battle", headers=headers)
    comm.scope["client"] = ("192.0.2.7", 40000)  # the key of the live-call limit
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "start", "prompt": "Say hello"})
    frames = await _frames_until(comm, "turn_end")
    assert frames[-1]["type"] == "turn_end", frames[-1]
    assert frames[-1]["battle"]["votable"] is True
    # The live-call limit (1 a day here) still holds, counted in this process.
    await comm.send_json_to({"type": "start", "prompt": "Say hello again"})
    frames = await _frames_until(comm, "turn_end")
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "rate_limited"
    await comm.disconnect()


def test_the_fallback_cache_passes_the_production_check_a_local_memory_cache_does_not(settings):
    from django.core.checks import run_checks

    settings.ARENA_PRODUCTION = True
    settings.RATELIMIT_ENABLE = True
    settings.CACHES = {
        "default": {"BACKEND": "arena.cache.FallbackRedisCache", "LOCATION": "redis://x"}
    }
    assert "arena.E002" not in {e.id for e in run_checks()}
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert "arena.E002" in {e.id for e in run_checks()}


@pytest.fixture
def silent_port():
    """A loopback port that takes connections into its backlog and never answers: a Redis that
    is down, which also shows whether anything tried to reach it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    yield listener
    listener.close()


def attempted(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


async def test_a_handshake_refused_for_its_origin_touches_neither_redis_nor_the_database(
    silent_port, settings, caplog
):
    from config.asgi import application

    # No django_db mark: a query from anywhere fails the test.
    url = f"redis://127.0.0.1:{silent_port.getsockname()[1]}/0"
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }
    settings.CACHES = {"default": {"BACKEND": "arena.cache.FallbackRedisCache", "LOCATION": url}}
    headers = [(b"origin", b"http://elsewhere.example"), (b"host", b"testserver")]
    caplog.set_level(logging.WARNING)
    for path in ("/ws/battle", "/ws/redteam"):
        comm = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await comm.connect(timeout=5)
        assert connected is False  # closed before accepted: the server answers 403
        await comm.send_input({"type": "websocket.disconnect", "code": 1006})
        await comm.wait(5)  # the refusal has ended without an exception
    assert not attempted(silent_port)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
