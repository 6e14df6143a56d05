"""grpo_trl.py against a small fake arena on loopback: TRL 1.16's GRPOTrainer trains through
a step whose group was only partly judged and one where nobody judged, and the run is closed.

The fake speaks the environment API's runs, submissions, cancels, rewards and close over a real
socket (``http.server``) and refuses what the arena refuses (a blank text, a NUL); which members
of each step's group are judged is scripted, so each step's rewards are known: all judged, two
of three, none. ``record_rewards`` is tested on its own too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpo_trl
import pytest
from fake_arena import FakeArena

# Step 0: every member judged; step 1: two of three; step 2 and after: none.
SCORES = {0: [30.0, -10.0, -20.0], 1: [15.0, -15.0, None]}


@pytest.fixture
def arena() -> Iterator[FakeArena]:
    with FakeArena(lambda step, member: SCORES.get(step, [None] * 16)[member]) as arena:
        yield arena


def test_grpo_trl_trains_through_a_partial_group_and_an_unjudged_one_and_closes_its_run(
    arena: FakeArena, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    argv = ["--url", arena.url, "--token", "t", "--name", "fake", "--steps", "3"]
    argv += ["--group-size", "3", "--timeout", "0.5", "--out", str(out), "--prompts", "2"]

    assert grpo_trl.main(argv) == 0

    result = json.loads(out.read_text())
    assert result["library"] == "trl" and result["closed"] is True
    [run] = arena.runs.values()
    assert result["run_id"] == run["id"] and run["state"] == "closed"
    assert (run["votes_per_completion"], run["share"]) == (1, 1.0)
    assert [s["step"] for s in result["steps"]] == [0, 1, 2]
    assert all(s["group_size"] == 3 for s in result["steps"])
    # Every group was sent whole: the tiny model's third group holds a NUL byte, which the
    # arena would refuse (400) and the adapter sends as U+FFFD.
    assert [len(s["completions"]) for s in arena.submissions] == [3, 3, 3]
    assert [s["scores"] for s in result["steps"]] == [SCORES[0], SCORES[1], [None] * 3]
    assert [s["judged"] for s in result["steps"]] == [3, 2, 0]
    # The two groups still waiting were cancelled once the trainer stopped waiting for them.
    assert arena.cancelled == [s["id"] for s in arena.answered[1:]]
    # The partial group moved the policy; the unjudged one moved nothing and logged no NaN.
    assert result["steps"][1]["grad_norm"] > 0
    assert (result["steps"][2]["grad_norm"], result["steps"][2]["loss"]) == (0.0, 0.0)
    printed = capsys.readouterr().out
    assert "step 1: judged" in printed and "done: 3 steps" in printed


def test_recorded_rewards_keep_each_group_and_its_judged_count() -> None:
    steps: list[dict[str, Any]] = []
    seen: list[dict[str, Any]] = []

    class State:
        global_step = 4

    def reward(prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        return [1.5, None, None, None, None, None]

    recorded = grpo_trl.record_rewards(reward, steps, group_size=3, on_step=seen.append)
    reward.__name__ = "human_reward"
    assert recorded(["p"] * 6, ["c"] * 6, trainer_state=State()) == [1.5] + [None] * 5
    assert (
        steps
        == seen
        == [
            {"step": 4, "scores": [1.5, None, None], "judged": 1, "group_size": 3},
            {"step": 4, "scores": [None, None, None], "judged": 0, "group_size": 3},
        ]
    )
