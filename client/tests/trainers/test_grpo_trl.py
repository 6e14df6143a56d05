"""grpo_trl.py against a small fake arena on loopback: TRL 1.16's GRPOTrainer trains through
a step whose group was only partly judged and one where nobody judged, and the run is closed.

The fake speaks the environment API's runs, submissions, cancels, rewards and close over a real
socket (``http.server``) and refuses what the arena refuses (a blank text, a NUL); which members
of each step's group are judged is scripted, so each step's rewards are known: all judged, two
of three, none. ``record_rewards`` is tested on its own too.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpo_trl
import pytest

PREFIX = "/api/env/v1"


class FakeArena:
    """Runs, submissions, their cancelling and a reward feed. ``judged(submission_index,
    member_index)`` is the score a member gets (at once), or ``None`` for one never judged."""

    def __init__(self, judged: Callable[[int, int], float | None]) -> None:
        self.judged = judged
        self.runs: dict[str, dict[str, Any]] = {}
        self.submissions: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.cancelled: list[str] = []  # submission ids
        self.answered: list[dict[str, Any]] = []  # the submissions' answers
        self.lock = threading.Lock()
        arena = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with arena.lock:
                    status, answer = arena.handle(self.command, self.path, body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        path, _, query = path.partition("?")
        parts = path.removeprefix(PREFIX).strip("/").split("/")
        if method == "POST" and parts == ["runs"]:
            run = {"id": str(uuid.uuid4()), "name": body["name"], "state": "open", **body}
            self.runs[run["id"]] = run
            return 201, run
        run = self.runs[parts[1]]
        if method == "POST" and parts[2:] == ["close"]:
            run["state"] = "closed"
            return 200, run
        if method == "POST" and parts[2:] == ["submissions"]:
            index = len(self.submissions)
            for member, item in enumerate(body["completions"]):
                # What the arena refuses: a blank text, or one it cannot store.
                if not item["text"].strip() or "\x00" in item["text"]:
                    field = f"completions.{member}.text"
                    return 400, {"error": {"code": "invalid", "message": field, "field": field}}
            submission = {"id": str(uuid.uuid4()), "completions": []}
            for member, item in enumerate(body["completions"]):
                cid = str(uuid.uuid4())
                submission["completions"].append({"id": cid})
                score = self.judged(index, member)
                self.records.append(
                    {
                        "completion_id": cid,
                        "submission_id": submission["id"],
                        "meta": item.get("meta"),
                        "votes": int(score is not None),
                        "score": score,
                        "status": "pending" if score is None else "complete",
                    }
                )
            self.submissions.append(body)
            self.answered.append(submission)
            return 201, submission
        if method == "POST" and parts[2] == "submissions" and parts[4:] == ["cancel"]:
            # The adapter cancels a group still waiting once it stops waiting for it.
            late = [
                r
                for r in self.records
                if r["submission_id"] == parts[3] and r["status"] == "pending"
            ]
            self.cancelled.append(parts[3])
            self.records.extend({**r, "status": "cancelled"} for r in late)
            return 200, {"submission_ids": [parts[3]] if late else []}
        if method == "GET" and parts[2:] == ["rewards"]:
            cursor = int(dict(p.split("=") for p in query.split("&"))["cursor"])
            page = self.records[cursor:]
            return 200, {"records": page, "next_cursor": cursor + len(page)}
        return 404, {"error": {"code": "not_found", "message": path}}

    def __enter__(self) -> FakeArena:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


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
