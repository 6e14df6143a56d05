"""Daily vote caps and the proof-of-work challenge before a session's first vote."""

import base64
import json
from datetime import UTC, datetime, timedelta

import altcha.v1 as altcha
import pytest
import time_machine
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test import Client

from arena.api import VOTER_SESSION_KEY
from arena.identity import ip_hash
from arena.models import Vote
from arena.services.terms import terms_accept
from arena.services.vote_guards import _hmac_key
from arena.tests.factories import pool_of
from arena.tests.redis_server import own_redis  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def pool():
    return pool_of(n_models=4, n_prompts=3, turns=1)


def new_visitor(ip="203.0.113.7"):
    client = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Test", REMOTE_ADDR=ip)
    client.get("/")
    terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
    return client


def battle_and_vote(client, winner="model_a"):
    battle = post_json(client, "/api/battles", {}).json()
    return post_json(client, f"/api/battles/{battle['id']}/vote", {"winner": winner})


# --- caps ---------------------------------------------------------------------------------------
def test_a_session_over_its_daily_cap_gets_a_429_naming_the_cap_and_nothing_is_written(
    settings, pool
):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 2
    settings.ARENA_VOTES_PER_IP_PER_DAY = 0
    visitor = new_visitor()
    assert battle_and_vote(visitor).status_code == 201
    assert battle_and_vote(visitor).status_code == 201
    refused = battle_and_vote(visitor)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "vote_cap"
    assert "ARENA_VOTES_PER_SESSION_PER_DAY" in error["message"]
    assert Vote.objects.count() == 2
    # another session from the same address is not this session's cap
    assert battle_and_vote(new_visitor()).status_code == 201


def test_an_address_over_its_daily_cap_is_refused_whatever_its_sessions(settings, pool):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 0
    settings.ARENA_VOTES_PER_IP_PER_DAY = 2
    assert battle_and_vote(new_visitor("198.51.100.1")).status_code == 201
    assert battle_and_vote(new_visitor("198.51.100.1")).status_code == 201
    refused = battle_and_vote(new_visitor("198.51.100.1"))
    assert refused.status_code == 429
    assert "ARENA_VOTES_PER_IP_PER_DAY" in refused.json()["error"]["message"]
    assert Vote.objects.count() == 2
    assert battle_and_vote(new_visitor("198.51.100.2")).status_code == 201


def test_a_refused_vote_does_not_use_up_the_cap(settings, pool):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 1
    visitor = new_visitor()
    battle = post_json(visitor, "/api/battles", {}).json()
    bad = post_json(visitor, f"/api/battles/{battle['id']}/vote", {"winner": "nobody"})
    assert bad.status_code == 400
    assert battle_and_vote(visitor).status_code == 201


def test_the_caps_start_again_at_midnight_utc(settings, pool):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 1
    settings.ARENA_VOTES_PER_IP_PER_DAY = 1
    with time_machine.travel(datetime(2026, 11, 30, 23, 59, 0, tzinfo=UTC), tick=False) as clock:
        visitor = new_visitor()
        assert battle_and_vote(visitor).status_code == 201
        assert battle_and_vote(visitor).status_code == 429
        clock.shift(timedelta(seconds=59))  # 23:59:59, still the same day
        assert battle_and_vote(visitor).status_code == 429
        clock.shift(timedelta(seconds=2))  # 00:00:01 the next day
        assert battle_and_vote(visitor).status_code == 201
    assert Vote.objects.count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # the vote commits, so its after-commit work runs
def test_a_listener_failing_after_commit_neither_fails_the_vote_nor_gives_its_cap_back(
    settings, pool, broken_vote_listener
):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 1
    visitor = new_visitor()
    visitor.raise_request_exception = False
    answer = battle_and_vote(visitor)
    assert answer.status_code == 201, answer.content
    assert answer.json()["state"] == "voted"
    assert Vote.objects.count() == 1
    assert broken_vote_listener(), "the receiver's failure is logged with its traceback"
    # The committed vote keeps its place in the day's cap.
    over = battle_and_vote(visitor)
    assert over.status_code == 429 and over.json()["error"]["code"] == "vote_cap"
    assert Vote.objects.count() == 1


@pytest.mark.redis
def test_caps_are_counted_in_redis_under_the_salted_ip_hash_never_the_raw_ip(settings, pool):
    if "Redis" not in django_settings.CACHES["default"]["BACKEND"]:
        pytest.fail("this test needs REDIS_URL: the caps are shared through Redis")
    settings.ARENA_VOTES_PER_IP_PER_DAY = 5
    ip = "192.0.2.44"
    assert battle_and_vote(new_visitor(ip)).status_code == 201
    redis = cache._cache.get_client(write=False)  # the real Redis behind the cache
    keys = [k.decode() for k in redis.keys("*vote-cap*")]
    assert any(ip_hash(ip) in key for key in keys)
    assert not any(ip in key for key in keys)
    ip_key = next(k for k in keys if ip_hash(ip) in k)
    assert int(redis.get(ip_key)) == 1
    assert 0 < redis.ttl(ip_key) <= 86400 + 60
    # a second worker (another client of the same Redis) sees the same count
    assert cache.get(ip_key.split(":", 2)[-1]) == 1


# --- the challenge --------------------------------------------------------------------------------
def solve(challenge):
    for number in range(challenge["maxnumber"] + 1):
        if (
            altcha.hash_hex("SHA-256", (challenge["salt"] + str(number)).encode())
            == challenge["challenge"]
        ):
            return number
    raise AssertionError("unsolvable challenge")


def payload_of(challenge, number=None):
    fields = {
        "algorithm": challenge["algorithm"],
        "challenge": challenge["challenge"],
        "number": solve(challenge) if number is None else number,
        "salt": challenge["salt"],
        "signature": challenge["signature"],
    }
    return base64.b64encode(json.dumps(fields).encode()).decode()


@pytest.fixture
def challenge_on(settings):
    settings.ARENA_CHALLENGE = True
    settings.ARENA_CHALLENGE_MAX_NUMBER = 2000


def verify(client, payload):
    return post_json(client, "/api/challenge/verify", {"payload": payload})


@pytest.mark.usefixtures("challenge_on")
def test_a_vote_without_a_solved_challenge_is_403_challenge_required(pool):
    visitor = new_visitor()
    response = battle_and_vote(visitor)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "challenge_required"
    assert not Vote.objects.exists()


@pytest.mark.usefixtures("challenge_on")
def test_a_solved_challenge_verifies_the_session_and_its_votes_count(pool):
    visitor = new_visitor()
    challenge = visitor.get("/api/challenge").json()
    assert challenge["algorithm"] == "SHA-256" and challenge["maxnumber"] == 2000
    assert "expires=" in challenge["salt"]
    response = verify(visitor, payload_of(challenge))
    assert response.status_code == 200 and response.json()["verified"] is True
    assert battle_and_vote(visitor).status_code == 201
    assert battle_and_vote(visitor).status_code == 201  # once per session, not per vote
    # the page no longer asks this session for one
    assert 'data-challenge="false"' in visitor.get("/").content.decode()
    assert 'data-challenge="true"' in new_visitor().get("/").content.decode()


@pytest.mark.usefixtures("challenge_on")
def test_a_wrong_number_is_refused_naming_the_payload(pool):
    visitor = new_visitor()
    challenge = visitor.get("/api/challenge").json()
    wrong = (solve(challenge) + 1) % (challenge["maxnumber"] + 1)
    response = verify(visitor, payload_of(challenge, number=wrong))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "challenge_failed"
    assert response.json()["error"]["field"] == "payload"
    assert battle_and_vote(visitor).status_code == 403


@pytest.mark.usefixtures("challenge_on")
def test_a_challenge_signed_with_another_key_is_refused(pool):
    visitor = new_visitor()
    forged = altcha.create_challenge(
        algorithm="SHA-256",
        max_number=100,
        salt_length=12,
        hmac_key="not-the-servers-key",
        salt="",
        number=None,
        expires=datetime.now(UTC) + timedelta(minutes=5),
        params=None,
    )
    challenge = {
        "algorithm": "SHA-256",
        "challenge": forged.challenge,
        "maxnumber": 100,
        "salt": forged.salt,
        "signature": forged.signature,
    }
    assert verify(visitor, payload_of(challenge)).status_code == 400


@pytest.mark.usefixtures("challenge_on")
def test_a_challenge_solved_once_cannot_verify_a_second_session(pool):
    first, second = new_visitor(), new_visitor()
    payload = payload_of(first.get("/api/challenge").json())
    assert verify(first, payload).status_code == 200
    replayed = verify(second, payload)
    assert replayed.status_code == 400
    assert "used already" in replayed.json()["error"]["message"]
    assert battle_and_vote(second).status_code == 403


@pytest.mark.usefixtures("challenge_on")
def test_an_expired_challenge_is_refused(settings, pool):
    settings.ARENA_CHALLENGE_EXPIRES_SECONDS = 60
    visitor = new_visitor()
    with time_machine.travel(datetime.now(UTC), tick=False) as clock:
        payload = payload_of(visitor.get("/api/challenge").json())
        clock.shift(timedelta(seconds=61))
        response = verify(visitor, payload)
    assert response.status_code == 400
    assert "expired" in response.json()["error"]["message"]


@pytest.mark.usefixtures("challenge_on")
def test_a_challenge_without_expiry_is_refused(pool):
    made = altcha.create_challenge(
        algorithm="SHA-256",
        max_number=100,
        salt_length=12,
        hmac_key=_hmac_key(),
        salt="",
        number=None,
        expires=None,
        params=None,
    )
    challenge = {
        "algorithm": "SHA-256",
        "challenge": made.challenge,
        "maxnumber": 100,
        "salt": made.salt,
        "signature": made.signature,
    }
    response = verify(new_visitor(), payload_of(challenge))
    assert response.status_code == 400
    assert "no expiry" in response.json()["error"]["message"]


@pytest.mark.usefixtures("challenge_on")
@pytest.mark.parametrize(
    "payload",
    [
        None,
        "",
        42,
        "not base64!",
        base64.b64encode(b"[1]").decode(),
        base64.b64encode(b"{}").decode(),
    ],
)
def test_a_missing_or_malformed_payload_is_a_400_naming_it(pool, payload):
    body = {} if payload is None else {"payload": payload}
    response = post_json(new_visitor(), "/api/challenge/verify", body)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "challenge_failed",
        "message": response.json()["error"]["message"],
        "field": "payload",
    }


def test_with_the_challenge_off_votes_need_none(settings, pool):
    settings.ARENA_CHALLENGE = False
    assert battle_and_vote(new_visitor()).status_code == 201


# --- Redis down -----------------------------------------------------------------------------------
@pytest.fixture
def cache_on_own_redis(own_redis, settings):  # noqa: F811
    """Production's cache (FallbackRedisCache) on a Redis of this test's own."""
    settings.CACHES = {
        "default": {
            "BACKEND": "arena.cache.FallbackRedisCache",
            "LOCATION": own_redis.url,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    return own_redis


@pytest.mark.redis
@pytest.mark.usefixtures("challenge_on")
def test_with_redis_down_the_caps_and_the_replay_guard_still_hold_per_process(
    cache_on_own_redis, settings, pool
):
    settings.ARENA_VOTES_PER_SESSION_PER_DAY = 1
    visitor, other = new_visitor(), new_visitor()
    payload = payload_of(visitor.get("/api/challenge").json())
    cache_on_own_redis.stop()
    assert verify(visitor, payload).status_code == 200
    assert verify(other, payload).status_code == 400  # replayed: refused without Redis too
    assert battle_and_vote(visitor).status_code == 201
    assert battle_and_vote(visitor).status_code == 429  # the cap counted in this process
    assert Vote.objects.count() == 1
