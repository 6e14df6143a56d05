"""The client's side of model rewards: create_run/start_run pass reward_model, a record's
source is read, and wait(accept_model=True) takes a model's record as done."""

import json

import pytest
from arena_env import ArenaEnv, ArenaEnvError, Reward
from arena_env.client import HttpResponse

RUN = "6f1c2d7e-0000-4000-8000-000000000002"


def record(cid, *, source=None, status="pending", score=None):
    return {
        "completion_id": cid,
        "submission_id": "sub-1",
        "meta": {},
        "votes": 0,
        "wins": 0,
        "losses": 0,
        "ties": 0,
        "both_bad": 0,
        "win_rate": None,
        "score": score,
        "score_low": None if score is None else score - 80,
        "score_high": None if score is None else score + 80,
        "source": source,
        "status": status,
    }


class Transport:
    """Answers each path from a list of (status, body), and keeps what was sent."""

    def __init__(self, answers):
        self.answers = answers
        self.sent = []

    def __call__(self, method, url, *, headers, body, timeout):
        self.sent.append((method, url, json.loads(body) if body else None))
        for prefix, queue in self.answers.items():
            if prefix in url and queue:
                status, data = queue.pop(0) if len(queue) > 1 else queue[0]
                return HttpResponse(status, {}, json.dumps(data).encode())
        return HttpResponse(404, {}, b'{"error": {"code": "not_found", "message": "no"}}')


def _env(answers):
    transport = Transport(answers)
    return ArenaEnv("http://arena.test", "tok", retries=0, transport=transport), transport


def test_create_run_sends_reward_model_only_when_asked():
    env, transport = _env({"/runs": [(201, {"id": RUN, "name": "r", "state": "open"})]})
    env.create_run("r")
    env.create_run("r", reward_model=True)
    assert "reward_model" not in transport.sent[0][2]
    assert transport.sent[1][2]["reward_model"] is True


def test_start_run_passes_reward_model_through():
    env, transport = _env({"/runs": [(201, {"id": RUN, "name": "r", "state": "open"})]})
    session = env.start_run("r", reward_model=True)
    assert session.id == RUN
    assert transport.sent[0][2]["reward_model"] is True


def test_an_arena_without_a_reward_model_refuses_with_the_field_named():
    body = {
        "error": {
            "code": "reward_model_unavailable",
            "message": "reward_model is unavailable on this arena: the setting is off.",
            "field": "reward_model",
        }
    }
    env, _ = _env({"/runs": [(409, body)]})
    with pytest.raises(ArenaEnvError) as caught:
        env.create_run("r", reward_model=True)
    assert (caught.value.status, caught.value.field) == (409, "reward_model")
    assert caught.value.code == "reward_model_unavailable"


def test_a_record_carries_its_source():
    assert Reward.from_json(record("c1", source="model", score=12.0)).source == "model"
    assert Reward.from_json(record("c1", source="human", score=12.0)).source == "human"
    assert Reward.from_json(record("c1")).source is None
    older = record("c1")
    del older["source"]  # an arena from before model rewards
    assert Reward.from_json(older).source is None
    with pytest.raises(ArenaEnvError):
        Reward.from_json(record("c1", source="oracle"))


def test_wait_with_accept_model_returns_as_soon_as_every_completion_has_a_model_record():
    feed = {
        "records": [
            record("c1", source="model", score=5.0),
            record("c2", source="model", score=-5.0),
        ],
        "next_cursor": 2,
    }
    env, _ = _env({"/rewards": [(200, feed), (200, {"records": [], "next_cursor": 2})]})
    found = env.wait(RUN, ["c1", "c2"], timeout=30, poll=0.01, accept_model=True)
    assert {cid: r.source for cid, r in found.items()} == {"c1": "model", "c2": "model"}


def test_wait_without_accept_model_does_not_take_a_model_record_as_done():
    feed = {"records": [record("c1", source="model", score=5.0)], "next_cursor": 1}
    env, _ = _env({"/rewards": [(200, feed), (200, {"records": [], "next_cursor": 1})]})
    found = env.wait(RUN, ["c1"], timeout=0.2, poll=0.05)
    assert found["c1"].source == "model" and not found["c1"].done


def test_wait_with_accept_model_still_waits_for_a_completion_without_a_score():
    feed = {"records": [record("c1", source="model", score=5.0), record("c2")], "next_cursor": 2}
    env, _ = _env({"/rewards": [(200, feed), (200, {"records": [], "next_cursor": 2})]})
    found = env.wait(RUN, ["c1", "c2"], timeout=0.2, poll=0.05, accept_model=True)
    assert found["c2"].source is None  # returned at the timeout, not done


def test_a_session_waits_with_accept_model_too():
    feed = {"records": [record("c1", source="human", score=1.0)], "next_cursor": 1}
    env, _ = _env(
        {
            "/runs/" + RUN + "/rewards": [(200, feed), (200, {"records": [], "next_cursor": 1})],
            "/runs": [(201, {"id": RUN, "name": "r", "state": "open"})],
        }
    )
    session = env.start_run("r", reward_model=True)
    assert session.wait(["c1"], timeout=30, poll=0.01, accept_model=True)["c1"].source == "human"
