"""The adapters' own logic against the scripted loopback server: how a trainer's batch is cut
into groups, what each group's submission carries, and what an unjudged completion gets. Their
runs against the real application are in test_client_live.py."""

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from arena_env import ArenaEnv, ArenaEnvError
from arena_env.adapters.atropos import HumanFeedbackEnv
from arena_env.adapters.trl import group_spans, human_reward
from arena_env.adapters.verifiers import human_reward as vf_human_reward
from arena_env.client import completion_text, prompt_messages
from arena_env_test_server import Answer, ScriptedServer

RUN = "run-1"


def record(cid: str, status: str, score: float | None) -> dict:
    return {
        "completion_id": cid,
        "submission_id": "s",
        "meta": {},
        "votes": 3 if status == "complete" else 1,
        "wins": 0,
        "losses": 0,
        "ties": 0,
        "both_bad": 0,
        "win_rate": None,
        "score": score,
        "score_low": None,
        "score_high": None,
        "status": status,
    }


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def env(scripted_server: ScriptedServer) -> ArenaEnv:
    return ArenaEnv(scripted_server.url, "t", retries=0, backoff=0.0)


def test_equal_consecutive_prompts_form_one_group_each():
    assert group_spans(["a", "a", "b", "a", "a"]) == [range(0, 2), range(2, 3), range(3, 5)]


def test_a_group_size_cuts_groups_even_when_neighbours_share_a_prompt():
    assert group_spans(["a"] * 4, group_size=2) == [range(0, 2), range(2, 4)]
    with pytest.raises(ValueError, match="mixes prompts"):
        group_spans(["a", "b"], group_size=2)
    with pytest.raises(ValueError, match="cannot be cut"):
        group_spans(["a"] * 3, group_size=2)


def test_a_group_over_the_api_bound_is_split_into_parts_of_sixteen():
    assert group_spans(["a"] * 40) == [range(0, 16), range(16, 32), range(32, 40)]


def test_conversational_completions_and_prompts_are_read_as_text_and_messages():
    assert completion_text([{"role": "assistant", "content": "hi"}]) == "hi"
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}]
    assert completion_text(parts) == "a"
    assert prompt_messages([{"role": "user", "content": "q", "name": "x"}]) == [
        {"role": "user", "content": "q"}
    ]


def test_message_objects_are_read_like_role_content_mappings():
    # verifiers 0.2 and later pass messages as objects (pydantic models), not dicts.
    user = SimpleNamespace(role="user", content="why?")
    part = SimpleNamespace(type="text", text="because")
    answer = SimpleNamespace(role="assistant", content=[part])
    assert prompt_messages([user]) == [{"role": "user", "content": "why?"}]
    assert completion_text([answer]) == "because"
    assert completion_text(answer) == "because"


def test_trl_function_leaves_blank_completions_out_of_the_group(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/submissions", Answer(201, {"id": "s1", "completions": [{"id": "c1"}]})
    )
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        Answer(200, {"records": [record("c1", "complete", 12.0)], "next_cursor": 1}),
        Answer(200, {"records": [], "next_cursor": 1}),
    )
    reward = human_reward(env, RUN, timeout=0.3, poll=0.05)
    # A blank completion would be refused (400) and abort the step; a group of blanks only is
    # not sent at all.
    assert reward(prompts=["p", "p", "q"], completions=[" \n", "fi\x00ne\ud800", ""]) == [
        None,
        12.0,
        None,
    ]
    (sent,) = [r.body for r in scripted_server.received if r.path.endswith("/submissions")]
    # A NUL or a lone surrogate (the arena refuses both) is sent as U+FFFD.
    assert sent["completions"] == [{"text": "fi\ufffdne\ufffd", "meta": {"index": 1}}]


def test_trl_function_submits_each_group_with_its_positions_and_step(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(201, {"id": "s1", "completions": [{"id": "c0"}, {"id": "c1"}]}),
        Answer(201, {"id": "s2", "completions": [{"id": "c2"}]}),
    )
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        Answer(
            200,
            {
                "records": [
                    record("c0", "complete", 30.0),
                    record("c1", "pending", 5.0),
                    record("c2", "expired", None),
                ],
                "next_cursor": 3,
            },
        ),
        *[Answer(200, {"records": [], "next_cursor": 3})] * 100,
    )
    scripted_server.add(
        f"/runs/{RUN}/submissions/s/cancel",
        Answer(200, {"submission_ids": ["s"], "completions": ["c1"]}),
    )
    reward = human_reward(env, RUN, timeout=0.3, poll=0.05)
    scores = reward(
        prompts=["p", "p", "q"],
        completions=["x", "y", "z"],
        trainer_state=SimpleNamespace(global_step=12),
    )
    assert scores == [30.0, None, None]  # only a complete record gives a score
    # The submission still waiting (c1 pending) is cancelled once the trainer stops waiting:
    # its late votes would be wasted. Once, though two of its completions were listed.
    cancels = [r.path for r in scripted_server.received if r.path.endswith("/cancel")]
    assert cancels == [f"/api/env/v1/runs/{RUN}/submissions/s/cancel"]
    first, second = (r.body for r in scripted_server.received[:2])
    assert first["prompt"] == "p" and second["prompt"] == "q"
    assert [c["meta"] for c in first["completions"]] == [
        {"index": 0, "step": 12},
        {"index": 1, "step": 12},
    ]
    assert second["completions"] == [{"text": "z", "meta": {"index": 2, "step": 12}}]


def test_atropos_env_gives_no_group_when_fewer_than_two_members_were_judged(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(201, {"id": "s1", "completions": [{"id": "c0"}, {"id": "c1"}]}),
    )
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        Answer(
            200,
            {
                "records": [record("c0", "complete", 1.0), record("c1", "pending", None)],
                "next_cursor": 2,
            },
        ),
        *[Answer(200, {"records": [], "next_cursor": 2})] * 50,
    )
    loop_env = HumanFeedbackEnv(
        env,
        RUN,
        ["p"],
        lambda prompt, n: ["a", "b"],
        group_size=2,
        timeout=0.2,
        poll=0.05,
        tokenize=toy_tokenize,
    )
    group, backlog = asyncio.run(loop_env.collect_trajectories("p"))
    assert group is None and backlog == []


def toy_tokenize(messages: object, text: str) -> tuple[list[int], list[int]]:
    """One id per character: the prompt's masked, the completion's kept."""
    prompt = [ord(c) for c in str(messages)]
    completion = [ord(c) for c in text]
    return prompt + completion, [-100] * len(prompt) + completion


def test_atropos_env_needs_a_tokenize_and_says_so(env):
    with pytest.raises(TypeError, match="tokenize="):
        HumanFeedbackEnv(env, RUN, ["p"], lambda prompt, n: ["a"] * n, timeout=1)


def test_a_partial_atropos_group_says_its_size_and_keeps_its_tokens(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(201, {"id": "s1", "completions": [{"id": c} for c in ("c0", "c1", "c2")]}),
    )
    done = [record("c0", "complete", 2.0), record("c1", "pending", None)]
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        Answer(200, {"records": [*done, record("c2", "complete", -1.0)], "next_cursor": 3}),
        *[Answer(200, {"records": [], "next_cursor": 3})] * 50,
    )
    loop_env = HumanFeedbackEnv(
        env,
        RUN,
        ["p"],
        lambda prompt, n: ["ab", "cd", "ef"],
        group_size=3,
        timeout=0.2,
        poll=0.05,
        tokenize=toy_tokenize,
    )
    group, _ = asyncio.run(loop_env.collect_trajectories("p"))
    assert group is not None
    # Atropos compares len(tokens) with this (else with its own group_size, and skips it).
    assert group["group_overrides"]["group_size"] == 2
    assert group["group_overrides"]["arena_scores"] == [2.0, None, -1.0]
    assert group["scores"] == [2.0, -1.0]
    assert group["tokens"] == [[ord("p"), ord("a"), ord("b")], [ord("p"), ord("e"), ord("f")]]
    assert group["masks"] == [[-100, ord("a"), ord("b")], [-100, ord("e"), ord("f")]]


def test_verifiers_calls_beyond_group_size_start_a_new_group(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(201, {"id": "s1", "completions": [{"id": "c0"}, {"id": "c1"}]}),
        Answer(201, {"id": "s2", "completions": [{"id": "c2"}]}),
    )
    done = [record(c, "complete", float(i)) for i, c in enumerate(("c0", "c1", "c2"))]
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        Answer(200, {"records": done, "next_cursor": 3}),
        *[Answer(200, {"records": [], "next_cursor": 3})] * 10,
    )
    reward = vf_human_reward(env, RUN, timeout=5, poll=0.01, group_size=2, window=0.05)

    async def three() -> list[float]:
        return await asyncio.gather(*(reward(prompt="p", completion=t) for t in "xyz"))

    assert sorted(asyncio.run(three())) == [0.0, 1.0, 2.0]
    posts = [r for r in scripted_server.received if r.method == "POST"]
    groups = [[c["text"] for c in r.body["completions"]] for r in posts]
    assert sorted(groups, key=len) == [["z"], ["x", "y"]]


def test_a_refused_verifiers_group_raises_in_every_waiting_call(scripted_server, env):
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(409, {"error": {"code": "run_closed", "message": "This run is closed."}}),
    )
    reward = vf_human_reward(env, RUN, timeout=5, window=0.05)

    async def two() -> list[object]:
        calls = (reward(prompt="p", completion=t) for t in "xy")
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(two())
    assert [type(r) for r in results] == [ArenaEnvError, ArenaEnvError]
    assert {r.code for r in results if isinstance(r, ArenaEnvError)} == {"run_closed"}
    assert len(scripted_server.received) == 1  # one group submitted, not one per call


def test_a_refused_verifiers_group_is_logged_and_kept_in_state_for_rubrics_that_swallow_it(
    scripted_server, env, caplog
):
    # verifiers 0.1/0.2 rubrics catch a reward function's exception and score 0.0: the
    # error log and the state entry are what tells the user the arena refused the group.
    scripted_server.add(
        f"/runs/{RUN}/submissions",
        Answer(400, {"error": {"code": "invalid", "message": "prompt must be a string"}}),
    )
    reward = vf_human_reward(env, RUN, timeout=5, window=0.05)
    state: dict = {}
    with caplog.at_level("ERROR", logger="arena_env"), pytest.raises(ArenaEnvError):
        asyncio.run(reward(prompt="p", completion="x", state=state))
    assert "400 invalid: prompt must be a string" in state["arena_error"]
    assert any("400 invalid" in r.getMessage() for r in caplog.records)


def test_a_verifiers_group_left_by_a_closed_event_loop_does_not_trap_later_calls(
    scripted_server, env
):
    scripted_server.add(
        f"/runs/{RUN}/submissions", Answer(201, {"id": "s1", "completions": [{"id": "c0"}]})
    )
    scripted_server.add(
        f"/runs/{RUN}/rewards",
        Answer(200, {"records": [record("c0", "complete", 4.0)], "next_cursor": 1}),
        *[Answer(200, {"records": [], "next_cursor": 1})] * 10,
    )
    reward = vf_human_reward(env, RUN, timeout=5, poll=0.01, window=0.3)

    async def abandoned() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reward(prompt="p", completion="x"), 0.01)

    asyncio.run(abandoned())  # the loop closes with the group still gathering calls
    assert asyncio.run(reward(prompt="p", completion="y")) == 4.0
    posts = [r.body for r in scripted_server.received if r.method == "POST"]
    assert [[c["text"] for c in body["completions"]] for body in posts] == [["y"]]
