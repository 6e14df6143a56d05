"""The verifiers adapter inside the real verifiers 0.4 stack: ``verifiers.v1`` environments run
real rollouts (its interception server, its subprocess runtime, its scoring) of the taskset in
``vf_arena_tasks.py`` against a model behind an OpenAI-compatible loopback server, and the
arena is the scripted loopback server. What is asserted is what the arena receives and what
verifiers records on each rollout's trace.

The last test is the end-to-end GRPO run (``grpo_verifiers.py``), marked ``e2e``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import verifiers.v1 as vf
import vf_arena_tasks
from arena_env import ArenaEnv
from arena_env.adapters.verifiers import (
    ArenaScoringError,
    human_group_env,
    human_reward,
    trace_rewards,
)
from chat_server import ChatServer
from fake_arena import FakeArena

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # client/tests: the scripted server
from arena_env_test_server import Answer, ScriptedServer  # noqa: E402

RUN = "run-1"
SYSTEM = {"role": "system", "content": vf_arena_tasks.SYSTEM}


def record(cid: str, score: float | None) -> dict[str, Any]:
    return {
        "completion_id": cid,
        "submission_id": "s1",
        "meta": {},
        "votes": 0 if score is None else 3,
        "wins": 0,
        "losses": 0,
        "ties": 0,
        "both_bad": 0,
        "win_rate": None,
        "score": score,
        "score_low": None,
        "score_high": None,
        "status": "pending" if score is None else "complete",
    }


def script_group(server: ScriptedServer, scores: Sequence[float | None]) -> None:
    """One accepted submission whose members get ``scores`` in the feed at once."""
    ids = [f"c{i}" for i in range(len(scores))]
    server.add(
        f"/runs/{RUN}/submissions",
        Answer(201, {"id": "s1", "completions": [{"id": cid} for cid in ids]}),
    )
    server.add(
        f"/runs/{RUN}/rewards",
        Answer(
            200,
            {"records": [record(c, s) for c, s in zip(ids, scores, strict=True)], "next_cursor": 9},
        ),
        *[Answer(200, {"records": [], "next_cursor": 9})] * 200,
    )


def posts(server: ScriptedServer) -> list[Any]:
    return [r.body for r in server.received if r.method == "POST"]


def scripted_model(replies: Sequence[str]) -> Callable[..., str]:
    texts = iter(replies)
    lock = threading.Lock()

    def reply(messages: Any, body: Any, headers: Any) -> str:
        with lock:
            return next(texts)

    return reply


@pytest.fixture
def arena() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def client(arena: ScriptedServer) -> ArenaEnv:
    return ArenaEnv(arena.url, "t", retries=0, backoff=0.0)


def env_config(config_type: type[Any], rewards: dict[str, Any] | None = None, **fields: Any) -> Any:
    return config_type(
        agent={"runtime": {"type": "subprocess"}},  # the tasks run on this host, no container
        taskset={"id": "vf_arena_tasks", "task": {"rewards": rewards or {}}},
        interception={"type": "server"},
        **fields,
    )


def task(env: Any, index: int) -> Any:
    return list(env.taskset)[index]


def run_episodes(env: Any, plan: Sequence[tuple[Any, int]], base_url: str) -> list[Any]:
    """Every slot of ``plan`` (a task and its rollouts), run at once as verifiers' eval runs
    them: in-process, inside ``env.serving()``."""
    ctx = vf.ModelContext(
        model="tiny",
        client=vf.EvalClientConfig(base_url=base_url, api_key_var="ARENA_TEST_MODEL_KEY"),
        sampling=vf.SamplingConfig(max_tokens=16),
    )

    async def run() -> list[Any]:
        async with env.serving():
            slots = [slot for t, n in plan for slot in env.slots(t, n)]
            return list(await asyncio.gather(*(env.run_slot(s, ctx) for s in slots)))

    return asyncio.run(asyncio.wait_for(run(), 120))


def traces(episodes: Sequence[Any]) -> list[Any]:
    return [t for e in episodes for t in e.traces]


def plugged_reward(monkeypatch: pytest.MonkeyPatch, reward: Any) -> dict[str, Any]:
    """``reward`` plugged into the taskset's tasks the way a 0.4 config plugs one."""
    monkeypatch.setattr(vf_arena_tasks, "arena_reward", reward, raising=False)
    return {"human_reward": {"fn": "vf_arena_tasks:arena_reward"}}


def completion(trace: Any) -> str:
    return "".join(m.content or "" for m in trace.assistant_messages)


# --- the per-rollout reward, plugged into 0.4's own scoring ------------------------------------
def test_the_rollouts_of_a_task_are_one_arena_group_and_the_feed_gives_their_rewards(
    arena: ScriptedServer, client: ArenaEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_group(arena, [12.5, -3.0, 7.0])
    reward = human_reward(client, RUN, timeout=5, poll=0.01, group_size=3, window=30)
    env = vf.SingleAgentEnv(
        env_config(vf.SingleAgentEnvConfig, plugged_reward(monkeypatch, reward))
    )
    with ChatServer(scripted_model(["first answer", "second answer", "third answer"])) as model:
        episodes = run_episodes(env, [(task(env, 0), 3)], model.base_url)

    [submission] = posts(arena)  # three independent episodes, one group
    texts = [c["text"] for c in submission["completions"]]
    assert sorted(texts) == ["first answer", "second answer", "third answer"]
    assert submission["prompt"] == [
        SYSTEM,
        {"role": "user", "content": vf_arena_tasks.PROMPTS[0]},
    ]
    scores = dict(zip(texts, [12.5, -3.0, 7.0], strict=True))
    for trace in traces(episodes):
        assert trace.ok, trace.errors
        assert trace.rewards["human_reward"].score == scores[completion(trace)]
        assert trace.info["arena_reward"]["status"] == "complete"
        assert trace.metrics["human_reward_judged"] == 1.0
    assert sorted(trace_rewards(episodes)) == [-3.0, 7.0, 12.5]


def test_a_refused_submission_fails_the_rollouts_loudly_instead_of_scoring_zero(
    arena: ScriptedServer,
    client: ArenaEnv,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    arena.add(
        f"/runs/{RUN}/submissions",
        Answer(400, {"error": {"code": "invalid", "message": "prompt must be a string"}}),
    )
    reward = human_reward(client, RUN, timeout=5, poll=0.01, group_size=2, window=30)
    env = vf.SingleAgentEnv(
        env_config(vf.SingleAgentEnvConfig, plugged_reward(monkeypatch, reward))
    )
    with (
        caplog.at_level(logging.ERROR, logger="arena_env"),
        ChatServer(scripted_model(["one", "two"])) as model,
    ):
        episodes = run_episodes(env, [(task(env, 0), 2)], model.base_url)

    assert len(posts(arena)) == 1  # the group was sent, and refused
    for trace in traces(episodes):
        # verifiers' own record of a failed scoring: not ok, the reward left unscored ...
        assert not trace.ok and trace.rewards["human_reward"] is None
        assert "400 invalid" in trace.errors[-1].message
        assert "400 invalid: prompt must be a string" in trace.info["arena_error"]
        assert trace.reward == 0.0  # ... which verifiers' own sum reads as 0.0
    with pytest.raises(ArenaScoringError, match="400 invalid"):
        trace_rewards(episodes)  # the adapter's reading does not
    assert any(
        "400 invalid" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
    )


def test_a_blank_completion_is_left_out_of_its_group_without_failing_the_others(
    arena: ScriptedServer, client: ArenaEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_group(arena, [4.0, -4.0])
    reward = human_reward(client, RUN, timeout=5, poll=0.01, group_size=3, window=30, missing=-1.0)
    env = vf.SingleAgentEnv(
        env_config(vf.SingleAgentEnvConfig, plugged_reward(monkeypatch, reward))
    )
    with ChatServer(scripted_model(["kept one", "  ", "kept two"])) as model:
        episodes = run_episodes(env, [(task(env, 2), 3)], model.base_url)

    [submission] = posts(arena)
    texts = [c["text"] for c in submission["completions"]]
    assert sorted(texts) == ["kept one", "kept two"]
    by_text = {completion(t): t for t in traces(episodes)}
    assert all(t.ok for t in by_text.values())
    blank = by_text["  "]
    assert blank.rewards["human_reward"].score == -1.0  # ``missing``: not judged
    assert blank.info["arena_reward"] is None and blank.metrics["human_reward_judged"] == 0.0
    scores = dict(zip(texts, [4.0, -4.0], strict=True))
    for text in texts:
        assert by_text[text].rewards["human_reward"].score == scores[text]


# --- the episode-level group: 0.4's cross-rollout judgement ------------------------------------
def test_a_group_env_submits_an_episodes_attempts_as_one_group_with_message_objects_read(
    arena: ScriptedServer, client: ArenaEnv
) -> None:
    script_group(arena, [1.0, 2.0, 3.0])
    group_env = human_group_env(client, RUN, timeout=5, poll=0.01, n=3)
    env = group_env(env_config(group_env.Config))
    with ChatServer(scripted_model(["alpha", "beta", "gamma"])) as model:
        [episode] = run_episodes(env, [(task(env, 1), 1)], model.base_url)

    assert episode.ok, episode.errors
    [submission] = posts(arena)
    # The task's prompt is verifiers' message objects, its text in a content part.
    assert isinstance(task(env, 1).data.prompt[0], vf.UserMessage)
    assert submission["prompt"] == [
        SYSTEM,
        {"role": "user", "content": vf_arena_tasks.PROMPTS[1]},
    ]
    texts = [c["text"] for c in submission["completions"]]
    assert sorted(texts) == ["alpha", "beta", "gamma"]
    assert [c["meta"]["trace"] for c in submission["completions"]] == [t.id for t in episode.traces]
    scores = dict(zip(texts, [1.0, 2.0, 3.0], strict=True))
    assert [t.rewards["human_reward"].score for t in episode.traces] == [
        scores[completion(t)] for t in episode.traces
    ]
    assert trace_rewards([episode]) == [scores[completion(t)] for t in episode.traces]


def test_a_refused_group_fails_its_episode_and_reading_its_rewards_raises(
    arena: ScriptedServer, client: ArenaEnv, caplog: pytest.LogCaptureFixture
) -> None:
    arena.add(
        f"/runs/{RUN}/submissions",
        Answer(409, {"error": {"code": "run_closed", "message": "This run is closed."}}),
    )
    group_env = human_group_env(client, RUN, timeout=5, poll=0.01, n=2)
    env = group_env(env_config(group_env.Config))
    with (
        caplog.at_level(logging.ERROR, logger="arena_env"),
        ChatServer(scripted_model(["a", "b"])) as model,
    ):
        [episode] = run_episodes(env, [(task(env, 0), 1)], model.base_url)

    assert not episode.ok and "run_closed" in episode.errors[-1].message
    assert all("human_reward" not in t.rewards for t in episode.traces)
    assert all("409 run_closed" in t.info["arena_error"] for t in episode.traces)
    with pytest.raises(ArenaScoringError, match="run_closed"):
        trace_rewards([episode])
    assert any("run_closed" in r.getMessage() for r in caplog.records)


# --- the GRPO run ----------------------------------------------------------------------------


@pytest.mark.e2e
def test_grpo_verifiers_trains_the_tiny_model_on_the_arenas_rewards_and_closes_its_run(
    tmp_path: Path,
) -> None:
    import grpo_verifiers

    # Submission k, member m: a spread of scores; the third submission's last member unjudged.
    scores = itertools.cycle([[30.0, -10.0, -20.0], [15.0, -15.0, 0.0], [5.0, -5.0, None]])
    table = [next(scores) for _ in range(16)]
    out = tmp_path / "result.json"
    with FakeArena(lambda k, m: table[k][m]) as arena:
        argv = ["--url", arena.url, "--token", "t", "--name", "vf-grpo", "--steps", "3"]
        argv += ["--group-size", "3", "--timeout", "2", "--out", str(out), "--prompts", "1"]
        assert grpo_verifiers.main(argv) == 0

    result = json.loads(out.read_text())
    [run] = arena.runs.values()
    assert result["library"] == "verifiers" and result["version"] == vf_version()
    assert result["run_id"] == run["id"] and run["state"] == "closed" and result["closed"]
    assert (run["votes_per_completion"], run["share"]) == (1, 1.0)
    # One arena group per step: the step's rollouts of its prompt, sent together.
    assert [len(s["completions"]) for s in arena.submissions] == [3, 3, 3]
    assert [s["step"] for s in result["steps"]] == [0, 1, 2]
    assert [s["scores"] for s in result["steps"]] == [table[0], table[1], table[2]]
    assert [s["judged"] for s in result["steps"]] == [3, 3, 2]
    for step in result["steps"]:
        assert [c["text"] for c in arena.submissions[step["step"]]["completions"]] == (
            step["completions"]
        )
        assert step["loss"] is not None and step["grad_norm"] > 0.0  # the policy moved
    assert result["parameters_changed"] is True


def vf_version() -> str:
    import verifiers

    return verifiers.__version__
