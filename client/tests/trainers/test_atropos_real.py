"""The Atropos adapter against the real atroposlib 0.4: its groups go through Atropos' own
``BaseEnv`` (``handle_send_to_api``: the group checks) to its own API server on loopback and
come back in a trainer's ``/batch``. The arena is the scripted loopback server; the tokenizer
the tiny one built here."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # client/tests: the scripted server

from arena_env import ArenaEnv  # noqa: E402
from arena_env.adapters.atropos import (  # noqa: E402
    HumanFeedbackEnv,
    atropos_env_class,
    chat_tokenize,
)
from arena_env_test_server import Answer, ScriptedServer  # noqa: E402
from atropos_api import atropos_api, call, pull_batch, register_trainer  # noqa: E402
from tiny import tiny_tokenizer  # noqa: E402

RUN = "run-1"
PROMPT = "Explain why the sky is blue."
TRAINERS = Path(__file__).resolve().parent


def record(cid: str, status: str, score: float | None) -> dict[str, Any]:
    return {
        "completion_id": cid,
        "submission_id": "s",
        "meta": {},
        "votes": 1 if status == "complete" else 0,
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


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> str:
    # BaseEnv loads its tokenizer by name (AutoTokenizer): a local directory, nothing fetched.
    path = tmp_path_factory.mktemp("tiny-tokenizer")
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture
def api() -> Iterator[str]:
    with atropos_api() as url:
        yield url


@pytest.fixture
def arena() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


def script_group(arena: ScriptedServer, *records: dict[str, Any], groups: int = 1) -> None:
    """``groups`` submissions of ``len(records) // groups`` completions each, and one feed
    page holding every record (the client keeps what it read between waits)."""
    size = len(records) // groups
    records = tuple(r | {"submission_id": f"s{i // size}"} for i, r in enumerate(records))
    for g in range(groups):
        ids = [{"id": r["completion_id"]} for r in records[g * size : (g + 1) * size]]
        arena.add(f"/runs/{RUN}/submissions", Answer(201, {"id": f"s{g}", "completions": ids}))
        # The adapter cancels a submission still waiting when it stops waiting.
        arena.add(
            f"/runs/{RUN}/submissions/s{g}/cancel",
            Answer(200, {"submission_ids": [f"s{g}"], "completions": []}),
        )
    arena.add(
        f"/runs/{RUN}/rewards",
        Answer(200, {"records": list(records), "next_cursor": len(records)}),
        *[Answer(200, {"records": [], "next_cursor": len(records)})] * 200,
    )


def feedback(
    arena: ScriptedServer, tokenizer: Any, texts: list[str], items: int = 1, **kw: Any
) -> HumanFeedbackEnv:
    env = ArenaEnv(arena.url, "t", retries=0, backoff=0.0)
    return HumanFeedbackEnv(
        env,
        RUN,
        [PROMPT] * items,
        lambda prompt, n: texts[:n],
        group_size=len(texts),
        timeout=0.3,
        poll=0.02,
        tokenizer=tokenizer,
        **kw,
    )


def base_env(hf: HumanFeedbackEnv, tokenizer_dir: str, api: str) -> Any:
    from atroposlib.envs.base import BaseEnvConfig
    from atroposlib.envs.server_handling.server_manager import ServerBaseline

    config = BaseEnvConfig(
        group_size=hf.group_size,
        use_wandb=False,
        tokenizer_name=tokenizer_dir,
        rollout_server_url=api,
        total_steps=10,
        wandb_name="arena",  # the name it registers with the API server
    )
    return atropos_env_class()(hf, config, ServerBaseline(), testing=True)


async def run_item(env: Any) -> Any:
    """One item through Atropos' own path: get_next_item, then handle_env (collect, check with
    handle_send_to_api, post to the API server)."""
    item = await env.get_next_item()
    key = str(uuid.uuid4())
    env.running_items[key] = {"item": item, "start_time": time.time()}
    return await env.handle_env(key)


def two_of_three_judged(arena: ScriptedServer, *, groups: int = 1) -> None:
    records = [
        [
            record(f"{g}c0", "complete", 12.0),
            record(f"{g}c1", "complete", -4.0),
            record(f"{g}c2", "pending", None),
        ]
        for g in range(groups)
    ]
    script_group(arena, *(r for group in records for r in group), groups=groups)


def test_a_missing_tokenize_is_a_clear_error_at_construction(arena):
    env = ArenaEnv(arena.url, "t", retries=0)
    with pytest.raises(TypeError, match=r"tokenize=.*tokenizer="):
        HumanFeedbackEnv(env, RUN, [PROMPT], lambda p, n: ["a"] * n, timeout=1)
    assert arena.received == []  # nothing was sent before the error


def test_chat_tokenize_masks_the_prompt_and_keeps_the_completion_ids(tokenizer):
    tokens, masks = chat_tokenize(tokenizer)(PROMPT, "Light scatters.")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    completion = tokenizer.encode("Light scatters.", add_special_tokens=False)
    assert tokens == [*prompt, *completion, tokenizer.eos_token_id]
    assert masks == [-100] * len(prompt) + [*completion, tokenizer.eos_token_id]
    assert tokenizer.decode(tokens[len(prompt) :], skip_special_tokens=True) == "Light scatters."


def test_atropos_own_tokenize_for_trainer_gives_no_token_list_with_transformers_5(tokenizer):
    # Why the adapter tokenizes itself: Atropos 0.4's helper reads apply_chat_template's answer
    # as a list, and transformers 5 answers a BatchEncoding.
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    chat = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "Light."}]
    assert not isinstance(tokenize_for_trainer(tokenizer, chat)["tokens"], list)


async def test_a_partial_group_passes_atropos_checks_and_reaches_a_trainers_batch(
    arena, tokenizer, tokenizer_dir, api
):
    # Two items, two of three members judged in each: Atropos' batcher packs groups of one
    # size into exactly batch_size sequences, and an env's batch is at least its group_size.
    two_of_three_judged(arena, groups=2)
    hf = feedback(arena, tokenizer, ["Light scatters.", "Blue is short.", "Because."], items=2)
    env = base_env(hf, tokenizer_dir, api)
    register_trainer(api, batch_size=4, num_steps=10)
    await env.get_server_info()  # Atropos' own batch/length settings from the trainer
    first = await run_item(env)
    second = await run_item(env)
    assert first is not None and second is not None
    batch = pull_batch(api)
    assert batch is not None and len(batch) == 2
    for group in batch:
        assert group["scores"] == [12.0, -4.0]
        assert group["group_overrides"]["group_size"] == 2
        assert group["group_overrides"]["arena_scores"] == [12.0, -4.0, None]
        assert len(group["tokens"]) == len(group["masks"]) == 2
        for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
            assert tokens and len(masks) == len(tokens)
            kept = [m for m in masks if m != -100]
            assert kept and kept == tokens[len(tokens) - len(kept) :]  # the completion's ids
            assert masks[0] == -100  # the prompt's
        assert [m[-1]["content"] for m in group["messages"]] == [
            "Light scatters.",
            "Blue is short.",
        ]


async def test_without_its_group_size_a_partial_group_is_skipped_by_atropos(
    arena, tokenizer, tokenizer_dir, api, caplog
):
    two_of_three_judged(arena)
    hf = feedback(arena, tokenizer, ["Light scatters.", "Blue is short.", "Because."])
    env = base_env(hf, tokenizer_dir, api)
    register_trainer(api, batch_size=3, num_steps=10)
    await env.get_server_info()
    group, _ = await env.collect_trajectories(await env.get_next_item())
    assert group is not None
    del group["group_overrides"]["group_size"]  # the group as the adapter used to give it
    with caplog.at_level(logging.WARNING):
        await env.handle_send_to_api(group)
    assert "token count mismatch (expected 3)" in caplog.text
    assert call(api, "/status")["queue_size"] == 0


async def test_a_padded_partial_group_keeps_the_registered_size_through_the_api(
    arena, tokenizer, tokenizer_dir, api
):
    # A registered environment's groups of another size wait in the API's buffer until they
    # add up to its group_size; padded, the partial group is queued and batched at once.
    two_of_three_judged(arena)
    hf = feedback(
        arena, tokenizer, ["Light scatters.", "Blue is short.", "Because."], partial="pad"
    )
    env = base_env(hf, tokenizer_dir, api)
    register_trainer(api, batch_size=3, num_steps=10)
    await env.register_env()
    await env.get_server_info()
    assert await run_item(env) is not None
    batch = pull_batch(api)
    assert batch is not None and len(batch) == 1
    (group,) = batch
    assert group["env_id"] == env.env_id
    assert group["scores"] == [12.0, -4.0, 4.0]  # the unjudged one: the judged members' mean
    assert [o["judged"] for o in group["overrides"]] == [True, True, False]
    assert all(m == -100 for m in group["masks"][2]) and group["tokens"][2]
    assert any(m != -100 for m in group["masks"][0])


async def test_a_registered_environments_shrunk_group_waits_in_atropos_buffer(
    arena, tokenizer, tokenizer_dir, api
):
    two_of_three_judged(arena)
    hf = feedback(arena, tokenizer, ["Light scatters.", "Blue is short.", "Because."])
    env = base_env(hf, tokenizer_dir, api)
    register_trainer(api, batch_size=3, num_steps=10)
    await env.register_env()
    await env.get_server_info()
    assert await run_item(env) is not None  # accepted by the environment's checks...
    assert call(api, "/status")["queue_size"] == 0  # ...and held by the server's buffer
    assert pull_batch(api) is None


async def test_no_group_when_no_member_was_judged_in_time(arena, tokenizer, tokenizer_dir, api):
    script_group(arena, *(record(f"c{i}", "pending", None) for i in range(3)))
    hf = feedback(arena, tokenizer, ["Light scatters.", "Blue is short.", "Because."])
    env = base_env(hf, tokenizer_dir, api)
    register_trainer(api, batch_size=3, num_steps=10)
    assert await run_item(env) is None
    assert call(api, "/status")["queue_size"] == 0


async def test_a_blank_completion_is_left_out_and_counts_as_unjudged(
    arena, tokenizer, tokenizer_dir, api
):
    script_group(arena, record("c0", "complete", 3.0), record("c1", "complete", -3.0))
    hf = feedback(arena, tokenizer, ["Light scatters.", "  ", "Blue is short."])
    group, _ = await hf.collect_trajectories(PROMPT)
    (posted,) = [r.body for r in arena.received if r.method == "POST"]
    assert [c["text"] for c in posted["completions"]] == ["Light scatters.", "Blue is short."]
    assert group is not None
    assert group["group_overrides"]["arena_scores"] == [3.0, None, -3.0]
    assert group["scores"] == [3.0, -3.0] and all(group["tokens"])


# --- the GRPO script, end to end against a scripted arena ----------------------------------


class FakeArena(ScriptedServer):
    """A stateful stand-in for the arena's API: runs, submissions with fresh ids, a reward
    feed with cursors, closing. ``judge(submission, member)`` gives a record's status and
    score once it is submitted."""

    def __init__(self, judge: Callable[[int, int], tuple[str, float | None]]) -> None:
        super().__init__()
        self.judge = judge
        self.feed: list[dict[str, Any]] = []
        self.submissions: list[list[str]] = []
        self.closed: list[str] = []
        self.cancelled: list[str] = []

    def _next(self, path: str) -> Answer:
        body = self.received[-1].body
        url = urllib.parse.urlsplit(path)
        parts = url.path.removeprefix("/api/env/v1").strip("/").split("/")
        if parts == ["runs"]:
            return Answer(201, {"id": "run-9", "name": body["name"], "state": "open"})
        if parts[-1] == "submissions":
            n = len(self.submissions)
            texts = [c["text"] for c in body["completions"]]
            self.submissions.append(texts)
            ids = [f"s{n}c{j}" for j in range(len(texts))]
            for j, cid in enumerate(ids):
                status, score = self.judge(n, j)
                self.feed.append(record(cid, status, score) | {"submission_id": f"s{n}"})
            return Answer(201, {"id": f"s{n}", "completions": [{"id": c} for c in ids]})
        if parts[-1] == "rewards":
            query = urllib.parse.parse_qs(url.query)
            cursor, limit = int(query["cursor"][0]), int(query["limit"][0])
            page = self.feed[cursor : cursor + limit]
            return Answer(200, {"records": page, "next_cursor": cursor + len(page)})
        if parts[-1] == "cancel" and len(parts) == 5:  # runs/{id}/submissions/{sid}/cancel
            self.cancelled.append(parts[3])
            return Answer(200, {"submission_ids": [parts[3]], "completions": []})
        if parts[-1] == "close":
            self.closed.append(parts[1])
            return Answer(200, {"id": parts[1], "state": "closed"})
        return Answer(599, {"error": {"code": "unscripted", "message": path}})


def judge(submission: int, member: int) -> tuple[str, float | None]:
    if submission == 1:
        return "pending", None  # nobody judged this group in time
    if submission == 0 and member == 2:
        return "pending", None  # a partial group
    return "complete", 10.0 - 7.0 * member


def test_the_grpo_script_trains_through_atropos_against_a_scripted_arena(tmp_path):
    out = tmp_path / "result.json"
    with FakeArena(judge) as fake:
        done = subprocess.run(
            [
                sys.executable,
                str(TRAINERS / "grpo_atropos.py"),
                *("--url", fake.url, "--token", "t", "--name", "atropos-grpo"),
                *("--steps", "3", "--group-size", "3", "--timeout", "2"),
                *("--out", str(out), "--prompts", "2", "--seed", "0"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["library"] == "atropos" and result["version"] == "0.4.0"
    assert result["run_id"] == "run-9" and result["closed"] is True
    assert fake.closed == ["run-9"]
    # The groups left waiting when the adapter stopped (the partial one, the unjudged one)
    # were cancelled: no visitor spends a vote the trainer will not read.
    assert fake.cancelled == ["s0", "s1"]
    steps = result["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert all(s["group_size"] == 3 and len(s["scores"]) == 3 for s in steps)
    assert all(t.strip() for texts in fake.submissions for t in texts)  # no blank submitted
    assert steps[1]["judged"] == 0 and steps[1]["scores"] == [None] * 3
    assert not steps[1]["trained"]
    assert 0 < steps[0]["judged"] < 3 and None in steps[0]["scores"]  # partial, still trained
    assert steps[0]["trained"] == (steps[0]["judged"] >= 2)
    assert any(s["trained"] for s in steps)
    assert len([ln for ln in done.stdout.splitlines() if ln.startswith("step ")]) == 3
