"""The client's HTTP behaviour against a scripted loopback server: what it sends, how it reads
errors, when it retries, how it follows the reward cursor and waits for records."""

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from arena_env import ArenaEnv, ArenaEnvError, Reward
from arena_env.client import HttpResponse, default_idempotency_key
from arena_env_test_server import Answer, ScriptedServer

RUN = "6f1c2d7e-0000-4000-8000-000000000001"


def record(cid: str, status: str = "pending", votes: int = 0, score: float | None = None) -> dict:
    return {
        "completion_id": cid,
        "submission_id": "sub-1",
        "meta": {"cid": cid},
        "votes": votes,
        "wins": votes,
        "losses": 0,
        "ties": 0,
        "both_bad": 0,
        "win_rate": 1.0 if votes else None,
        "score": score,
        "score_low": None if score is None else score - 50,
        "score_high": None if score is None else score + 50,
        "status": status,
    }


def page(records: list[dict], next_cursor: int) -> Answer:
    return Answer(200, {"records": records, "next_cursor": next_cursor})


def submission(*cids: str) -> dict:
    return {"id": "sub-1", "completions": [{"id": c} for c in cids]}


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def env(scripted_server: ScriptedServer) -> ArenaEnv:
    return ArenaEnv(scripted_server.url, "tok-secret", retries=2, backoff=0.0, timeout=5)


def test_create_run_sends_the_token_and_the_run_fields(scripted_server, env):
    scripted_server.add("/runs", Answer(201, {"id": RUN, "name": "r1", "state": "open"}))
    run = env.create_run("r1", references=["gpt-4"], votes_per_completion=2, share=0.5)
    assert (run.id, run.name, run.state) == (RUN, "r1", "open")
    sent = scripted_server.received[0]
    assert (sent.method, sent.path) == ("POST", "/api/env/v1/runs")
    assert sent.headers["Authorization"] == "Bearer tok-secret"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.body == {
        "name": "r1",
        "references": ["gpt-4"],
        "votes_per_completion": 2,
        "ttl_hours": 72,
        "share": 0.5,
    }


def test_an_error_body_becomes_a_typed_error_with_code_message_and_field(scripted_server, env):
    scripted_server.add(
        "/runs",
        Answer(
            400,
            {"error": {"code": "invalid", "message": "share is at most 1.", "field": "share"}},
        ),
    )
    with pytest.raises(ArenaEnvError) as caught:
        env.create_run("r1", share=2.0)
    error = caught.value
    assert (error.status, error.code, error.field) == (400, "invalid", "share")
    assert error.message == "share is at most 1."


def test_an_error_without_a_json_body_is_an_http_error_with_its_text(scripted_server, env):
    scripted_server.add(f"/runs/{RUN}", Answer(404, raw=b"<h1>Not Found</h1>"))
    with pytest.raises(ArenaEnvError) as caught:
        env.run(RUN)
    assert (caught.value.status, caught.value.code) == (404, "http_error")
    assert "Not Found" in caught.value.message


def test_a_429_is_retried_even_for_creating_a_run(scripted_server, env):
    scripted_server.add(
        "/runs",
        Answer(429, {"error": {"code": "rate_limited", "message": "slow"}}, {"Retry-After": "0"}),
        Answer(201, {"id": RUN}),
    )
    assert env.create_run("r1").id == RUN
    assert len(scripted_server.received) == 2


def test_a_5xx_is_not_retried_for_creating_a_run(scripted_server, env):
    scripted_server.add("/runs", Answer(502, raw=b"bad gateway"), Answer(201, {"id": RUN}))
    with pytest.raises(ArenaEnvError) as caught:
        env.create_run("r1")
    assert caught.value.status == 502
    assert len(scripted_server.received) == 1


def test_a_5xx_on_a_read_is_retried_then_reported(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}",
        *[Answer(503, {"error": {"code": "server_error", "message": "down"}})] * 3,
    )
    with pytest.raises(ArenaEnvError) as caught:
        env.run(RUN)
    assert (caught.value.status, caught.value.code) == (503, "server_error")
    assert len(scripted_server.received) == 3  # the first try and two retries


def test_a_submission_retried_after_a_5xx_carries_the_same_idempotency_key(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(500, {"error": {"code": "server_error", "message": "oops"}}),
        Answer(201, submission("c1", "c2")),
    )
    result = env.submit(RUN, "Say hi", ["hi", "hello"], meta=[{"step": 1}, {"step": 2}])
    assert result.completion_ids == ("c1", "c2")
    assert not result.replayed
    first, second = scripted_server.received
    assert first.body == second.body
    assert first.body["idempotency_key"] == result.idempotency_key
    assert first.body["completions"] == [
        {"text": "hi", "meta": {"step": 1}},
        {"text": "hello", "meta": {"step": 2}},
    ]


def test_a_replayed_submission_is_reported_as_such(scripted_server, env):
    scripted_server.add(f"/runs/{RUN}/submissions", Answer(200, submission("c1")))
    assert env.submit(RUN, "Say hi", ["hi"], idempotency_key="mine").replayed
    assert scripted_server.received[0].body["idempotency_key"] == "mine"


def test_the_default_key_is_stable_for_the_same_group_and_differs_for_another():
    body = {"prompt": "p", "completions": [{"text": "a"}]}
    assert default_idempotency_key(RUN, body) == default_idempotency_key(RUN, dict(body))
    other = {"prompt": "p", "completions": [{"text": "b"}]}
    assert default_idempotency_key(RUN, body) != default_idempotency_key(RUN, other)
    assert default_idempotency_key(RUN, body) != default_idempotency_key("another-run", body)


def test_conversational_prompts_and_one_meta_for_all_completions(scripted_server, env):
    scripted_server.add(f"/runs/{RUN}/submissions", Answer(201, submission("c1", "c2")))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    env.submit(RUN, messages, ["a", {"text": "b", "meta": {"own": True}}], meta={"step": 3})
    sent = scripted_server.received[0].body
    assert sent["prompt"] == messages
    assert [c["meta"] for c in sent["completions"]] == [{"step": 3}, {"step": 3}]


def test_a_meta_list_of_the_wrong_length_is_refused_before_sending(scripted_server, env):
    with pytest.raises(ValueError, match="meta has 1 entries for 2 completions"):
        env.submit(RUN, "p", ["a", "b"], meta=[{}])
    assert scripted_server.received == []


def test_a_refused_connection_is_retried_for_reads_then_reported():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = ArenaEnv(f"http://127.0.0.1:{port}", "t", retries=1, backoff=0.0)
    with pytest.raises(ArenaEnvError) as caught:
        env.run(RUN)
    assert (caught.value.status, caught.value.code) == (0, "connection_error")


def test_by_default_a_submission_outlasts_an_arena_down_for_nine_refused_attempts():
    # Ten retries by default (a minute and more with the default back-off): a restarted arena
    # costs a trainer a pause, not its run. Back-off zero here so the test does not wait.
    calls: list[str] = []

    def transport(method, url, *, headers, body, timeout):
        calls.append(method)
        if len(calls) <= 9:
            raise ConnectionRefusedError("arena restarting")
        return HttpResponse(201, {}, json.dumps(submission("c1")).encode())

    env = ArenaEnv("http://arena.test", "t", backoff=0.0, transport=transport)
    assert env.submit(RUN, "p", ["a"]).completion_ids == ("c1",)
    assert len(calls) == 10


def test_rewards_follow_the_cursor_until_an_empty_page(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        page([record("c1"), record("c2")], 2),
        page([record("c3")], 3),
        page([], 3),
    )
    feed = env.rewards(RUN, limit=2)
    assert [r.completion_id for r in feed] == ["c1", "c2", "c3"]
    assert feed.cursor == 3
    cursors = [r.path.split("cursor=")[1].split("&")[0] for r in scripted_server.received]
    assert cursors == ["0", "2", "3"]
    assert all("limit=2" in r.path for r in scripted_server.received)


def test_a_feed_resumes_from_its_cursor_and_sees_only_later_records(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        page([record("c1")], 7),
        page([], 7),
        page([record("c1", "complete", 3, 12.5)], 9),
        page([], 9),
    )
    feed = env.rewards(RUN)
    first = list(feed)
    later = list(env.rewards(RUN, cursor=feed.cursor))
    assert [r.status for r in first] == ["pending"]
    assert [(r.status, r.score) for r in later] == [("complete", 12.5)]
    assert "cursor=7" in scripted_server.received[2].path


def test_reward_records_keep_every_field_and_the_trainer_meta():
    reward = Reward.from_json(record("c1", "complete", 3, 10.0))
    assert reward.meta == {"cid": "c1"}
    assert (reward.votes, reward.wins, reward.score_low, reward.score_high) == (3, 3, -40.0, 60.0)
    assert reward.complete and reward.done


def test_wait_returns_once_every_completion_is_done_with_its_latest_record(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        page([record("c1"), record("c2"), record("other")], 3),
        page([], 3),
        page([record("c1", "complete", 3, 20.0)], 4),
        page([], 4),
        page([record("c2", "expired", 1)], 5),
        page([], 5),
    )
    rewards = env.wait(RUN, ["c1", "c2"], timeout=30, poll=0.01)
    assert set(rewards) == {"c1", "c2"}
    assert (rewards["c1"].status, rewards["c1"].score) == ("complete", 20.0)
    assert rewards["c2"].status == "expired"
    assert len(scripted_server.received) == 6  # no read after the last one needed


def test_wait_gives_up_at_the_timeout_with_what_it_has(scripted_server, env):
    scripted_server.add(f"/runs/{RUN}/rewards", page([record("c1", votes=1)], 1))
    scripted_server.script["/api/env/v1/runs/" + RUN + "/rewards"].extend([page([], 1)] * 1000)
    rewards = env.wait(RUN, ["c1", "never"], timeout=0.2, poll=0.05)
    assert list(rewards) == ["c1"]
    assert rewards["c1"].status == "pending"


def test_concurrent_waits_share_one_read_of_the_feed(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        page([record("a", "complete", 3, 1.0), record("b", "complete", 3, -1.0)], 2),
    )
    scripted_server.script["/api/env/v1/runs/" + RUN + "/rewards"].extend([page([], 2)] * 100)
    results: dict[str, dict] = {}

    def wait_for(cid: str) -> None:
        results[cid] = env.wait(RUN, [cid], timeout=10, poll=0.01)

    threads = [threading.Thread(target=wait_for, args=(c,)) for c in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results["a"]["a"].score == 1.0
    assert results["b"]["b"].score == -1.0
    first_page_reads = [r for r in scripted_server.received if "cursor=0" in r.path]
    assert len(first_page_reads) == 1


def test_the_token_never_shows_in_the_client_repr():
    assert "tok-secret" not in repr(ArenaEnv("http://127.0.0.1:1", "tok-secret"))


def test_the_wait_before_a_retry_is_the_servers_retry_after_capped(scripted_server, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr("arena_env.client.time.sleep", slept.append)
    env = ArenaEnv(scripted_server.url, "t", retries=3, backoff=1.0, max_backoff=10.0)
    limited = {"error": {"code": "rate_limited", "message": "slow"}}
    scripted_server.add(
        f"/runs/{RUN}",
        Answer(429, limited, {"Retry-After": "7"}),
        Answer(429, limited, {"Retry-After": "3600"}),
        Answer(503, {"error": {"code": "server_error", "message": "down"}}),
        Answer(200, {"id": RUN}),
    )
    assert env.run(RUN).id == RUN
    assert slept[:2] == [7.0, 10.0]
    # Without Retry-After: the exponential back-off (1 s doubled twice), with jitter in [50%, 100%].
    assert 2.0 <= slept[2] <= 4.0


def test_a_submission_refused_for_too_many_pending_waits_the_retry_after_and_goes_on(
    scripted_server, monkeypatch
):
    slept: list[float] = []
    monkeypatch.setattr("arena_env.client.time.sleep", slept.append)
    env = ArenaEnv(scripted_server.url, "t", retries=3, backoff=1.0, max_backoff=30.0)
    full = {"error": {"code": "too_many_pending", "message": "wait for votes"}}
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(429, full, {"Retry-After": "20"}),
        Answer(201, submission("c1")),
    )
    assert env.submit(RUN, "2+2?", ["4"]).completion_ids == ("c1",)
    assert slept == [20.0]


# --- runs managed with `with` ----------------------------------------------------------------


def _closes(server: ScriptedServer) -> list[str]:
    return [r.path for r in server.received if r.method == "POST" and r.path.endswith("/close")]


def test_a_run_session_closes_its_run_when_the_block_ends(scripted_server, env):
    scripted_server.add("/runs", Answer(201, {"id": RUN, "name": "r", "state": "open"}))
    scripted_server.add(f"/runs/{RUN}/submissions", Answer(201, submission("c1")))
    scripted_server.add(f"/runs/{RUN}/close", Answer(200, {"id": RUN, "state": "closed"}))
    with env.start_run("r") as run:
        assert run.submit("2+2?", ["4"]).completion_ids == ("c1",)
    assert _closes(scripted_server) == [f"/api/env/v1/runs/{RUN}/close"]
    assert run.run.state == "closed"


def test_a_run_session_closes_its_run_when_the_block_raises(scripted_server, env):
    scripted_server.add("/runs", Answer(201, {"id": RUN}))
    scripted_server.add(f"/runs/{RUN}/close", Answer(200, {"id": RUN, "state": "closed"}))
    with pytest.raises(RuntimeError, match="trainer crashed"), env.start_run("r"):
        raise RuntimeError("trainer crashed")
    assert _closes(scripted_server) == [f"/api/env/v1/runs/{RUN}/close"]


def test_a_failed_close_does_not_hide_the_blocks_exception(scripted_server, env):
    scripted_server.add("/runs", Answer(201, {"id": RUN}))
    scripted_server.add(
        f"/runs/{RUN}/close", Answer(404, {"error": {"code": "not_found", "message": "gone"}})
    )
    with pytest.raises(RuntimeError, match="trainer crashed"), env.start_run("r"):
        raise RuntimeError("trainer crashed")


def test_a_failed_close_after_a_clean_block_is_raised(scripted_server, env):
    scripted_server.add("/runs", Answer(201, {"id": RUN}))
    scripted_server.add(
        f"/runs/{RUN}/close", Answer(404, {"error": {"code": "not_found", "message": "gone"}})
    )
    with pytest.raises(ArenaEnvError) as raised, env.start_run("r"):
        pass
    assert raised.value.code == "not_found"


def test_the_client_as_a_context_manager_closes_the_runs_it_created_and_left_open(
    scripted_server,
):
    other = "22222222-2222-2222-2222-222222222222"
    scripted_server.add("/runs", Answer(201, {"id": RUN}), Answer(201, {"id": other}))
    scripted_server.add(f"/runs/{RUN}/close", Answer(200, {"id": RUN, "state": "closed"}))
    scripted_server.add(f"/runs/{other}/close", Answer(200, {"id": other, "state": "closed"}))
    with (
        pytest.raises(KeyboardInterrupt),
        ArenaEnv(scripted_server.url, "t", retries=0) as env,
    ):
        env.create_run("a")
        env.create_run("b")
        env.close_run(RUN)
        raise KeyboardInterrupt
    assert _closes(scripted_server) == [
        f"/api/env/v1/runs/{RUN}/close",
        f"/api/env/v1/runs/{other}/close",
    ]


def test_runs_lists_every_page_and_cancel_sends_the_age(scripted_server, env):
    scripted_server.add(
        "/runs?",
        Answer(200, {"runs": [{"id": "r2"}, {"id": "r1"}], "next_offset": 2}),
        Answer(200, {"runs": [{"id": "r0"}], "next_offset": None}),
    )
    assert [r.id for r in env.runs(limit=2)] == ["r2", "r1", "r0"]
    scripted_server.add(
        f"/runs/{RUN}/submissions/cancel",
        Answer(200, {"submission_ids": ["s1"], "completions": 2}),
    )
    assert env.cancel_submissions(RUN, older_than_seconds=600) == ["s1"]
    assert scripted_server.received[-1].body == {"older_than_seconds": 600}


def test_a_cancelled_record_is_done():
    assert Reward.from_json(record("c1", status="cancelled")).done


def test_a_run_reads_why_it_closed_and_its_last_activity():
    from arena_env import Run

    run = Run.from_json(
        {"id": RUN, "state": "closed", "closed_reason": "idle", "last_activity_at": "2026-01-01"}
    )
    assert (run.closed_reason, run.last_activity_at) == ("idle", "2026-01-01")
