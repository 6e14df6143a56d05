"""GRPO runs of a tiny local model against the production shape while scripted visitors vote.

Each trainer script of ``client/tests/trainers`` (``grpo_trl.py``, ``grpo_verifiers.py``,
``grpo_atropos.py``: whichever are there) runs in the trainers' virtualenv as a subprocess,
as a trainer's job runs beside the arena: one run (``share=1.0``, one vote per completion),
``STEPS`` GRPO steps of ``GROUP`` completions each, every reward from the visitors' votes,
waited for ``TIMEOUT`` seconds per group. The arena is ``tests/test_production_shape.py``'s
``production`` shape (uvicorn, Celery worker and beat, PostgreSQL and Redis of its own) with a
short battle hold (``HOLD``). The visitors are HTTP sessions as in
``tests/test_production_rigging.py`` (the page, the terms, the proof of work, pool battles and
votes); the battles the arena serves them are the trainer's groups (they read which group a
battle shows from the database, as a test's oracle; the page never says). Along the way:

- **Step 0, an abandoned battle.** One visitor opens the run's first battle and never votes.
  Its pair counts as being judged for ``HOLD`` seconds only: one of its two completions has
  no other opponent it has not met, and comes back to another visitor after the hold, who
  judges it, so the group is judged whole within the trainer's timeout. (With the old fixed
  hold, or ``ARENA_ENV_BATTLE_HOLD_SECONDS=300``, that completion would wait out the timeout.)
- **Step 1, a partial group and an outage.** The visitors vote on one battle of the group, then
  none until the trainer has moved on: the step trains on the judged members
  (``0 < judged < size``). Right after that vote uvicorn is stopped (SIGTERM to its process
  group), left down for ``OUTAGE_SECONDS`` and started again, while the trainer waits for the
  group: its client retries through the outage, and its next group comes after the restart.
- **Step 2**, voted after the restart, is judged whole.
- **Afterwards.** The script exited 0 with every step; the token's runs (``GET
  /api/env/v1/runs``) are all closed, by the trainer; every vote a visitor was answered 201
  for is in the database.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import TRAINERS_PYTHON
from tests.test_production_rigging import Visitor
from tests.test_production_shape import (  # noqa: F401  (fixtures)
    ROOT,
    Database,
    ProductionShape,
    _api_token,
    _env_call,
    _read,
    production,
)

TRAINERS = ROOT / "client" / "tests" / "trainers"
SCRIPTS = sorted(path.name for path in TRAINERS.glob("grpo_*.py"))

pytestmark = [
    pytest.mark.production,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.trainers,
    # The shape's setup takes one to four minutes on a busy two-core machine, the run about two.
    pytest.mark.timeout(900),
]

STEPS = 3
GROUP = 3
HOLD = 5  # ARENA_ENV_BATTLE_HOLD_SECONDS
# Each group's wait: the partial group waits it out, through the outage and uvicorn's restart.
TIMEOUT = 40
OUTAGE_SECONDS = 10
RUN_SECONDS = 420  # a bound on the trainer's whole run
ABANDONED, PARTIAL = 0, 1  # the steps (one group each, in submission order)


@pytest.fixture
def production_env() -> dict[str, str]:
    # Every visitor is 127.0.0.1, and they poll for battles: the per-address limits, at
    # production's values, count them as one visitor (see tests/test_production_rigging.py).
    # So does the rewards' source bound: one address counts one vote per completion, and in a
    # group of three any two pairs share a completion, so the second vote of the same address
    # on a group is left out of the fit and its completion is served again, to the same one
    # address, for ever (ratings/tests/test_env_rewards.py tests the bound with two).
    return {
        "ARENA_ENV_BATTLE_HOLD_SECONDS": str(HOLD),
        "ARENA_ENV_SOURCE_MIN_VOTES": "1000",
        "ARENA_RATELIMIT_BATTLES": "100000/m",
        "ARENA_RATELIMIT_VOTES": "100000/m",
        "ARENA_VOTES_PER_IP_PER_DAY": "100000",
    }


@dataclass
class Scenario:
    """What the visitors may do, and what they did: the run's groups in submission order, the
    abandoned battle, the votes each group may still take, the outage."""

    shape: ProductionShape
    database: Database
    run_name: str
    run_id: str | None = None
    groups: list[str] = field(default_factory=list)  # submission ids, in order
    abandoned: dict[str, Any] | None = None
    outage: tuple[float, float] | None = None  # (stopped, started again), monotonic
    # When uvicorn was stopped and when it was started again, as the clock's times.
    outage_wall: tuple[datetime, datetime] | None = None
    cast: list[str] = field(default_factory=list)  # battles voted, answered 201
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    voting: threading.Event = field(default_factory=threading.Event)  # after the abandonment
    outage_due: threading.Event = field(default_factory=threading.Event)
    votes_on: dict[int, int] = field(default_factory=dict)  # votes cast per group index

    def refresh(self) -> None:
        if self.run_id is None:
            rows = self.database.query("SELECT id FROM arena_envrun WHERE name = %s", self.run_name)
            if not rows:
                return
            self.run_id = str(rows[0][0])
        rows = self.database.query(
            "SELECT id FROM arena_envsubmission WHERE run_id = %s ORDER BY created_at, id",
            self.run_id,
        )
        with self.lock:
            self.groups = [str(r[0]) for r in rows]

    def group_of(self, battle_id: str) -> int | None:
        """The index of the run's group the battle shows, or None for any other battle."""
        rows = self.database.query(
            "SELECT run_id, submission_id FROM arena_envbattle WHERE battle_id = %s", battle_id
        )
        if not rows or str(rows[0][0]) != self.run_id:
            return None
        submission = str(rows[0][1])
        if submission not in self.groups:
            self.refresh()
        return self.groups.index(submission)

    def paused(self) -> bool:
        """Whether the visitors wait before asking for a battle: until the abandoned battle is
        served, and from the partial group's one vote until the trainer has moved on."""
        with self.lock:
            return not self.voting.is_set() or self._partial_closed()

    def _partial_closed(self) -> bool:
        return bool(self.votes_on.get(PARTIAL)) and len(self.groups) <= PARTIAL + 1

    def may_vote(self, group: int) -> bool:
        """Take the right to vote on a battle of ``group`` (given back by ``voted``)."""
        with self.lock:
            if group == PARTIAL and self._partial_closed():
                return False
            self.votes_on[group] = self.votes_on.get(group, 0) + 1
            return True

    def voted(self, group: int, battle_id: str | None) -> None:
        with self.lock:
            if battle_id is None:
                self.votes_on[group] -= 1  # not cast after all
                return
            self.cast.append(battle_id)
        if group == PARTIAL:
            self.outage_due.set()


def _call(visitor: Visitor, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A visitor's request; (0, None) when no answer came (uvicorn is down)."""
    try:
        return visitor.call(method, path, body)
    except (urllib.error.URLError, OSError):
        return 0, None


def _signed_up(scenario: Scenario) -> Visitor:
    visitor = Visitor(scenario.shape.url)
    visitor.sign_up()
    return visitor


def _guarded(scenario: Scenario, work: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001  (re-raised by the test)
            scenario.errors.append(exc)
            scenario.done.set()

    return run


def _abandoner(scenario: Scenario) -> None:
    """Asks for battles until it is served one of the run's first group, then leaves."""
    visitor = _signed_up(scenario)
    while not scenario.done.is_set():
        status, battle = _call(visitor, "POST", "/api/battles", {})
        if status == 201 and scenario.run_id and scenario.group_of(battle["id"]) == ABANDONED:
            [(session, created, a, b)] = scenario.database.query(
                """
                SELECT bt.session_hash, bt.created_at, e.completion_a_id, e.completion_b_id
                FROM arena_battle bt JOIN arena_envbattle e ON e.battle_id = bt.id
                WHERE bt.id = %s
                """,
                battle["id"],
            )
            scenario.abandoned = {
                "battle": battle["id"],
                "session": session,
                "created_at": created,
                "completions": {str(a), str(b)},
            }
            scenario.voting.set()
            return
        time.sleep(0.5)


def _voter(scenario: Scenario, seed: int) -> None:
    """Votes on the run's battles it is served, as the scenario allows; drops pool battles."""
    rng = random.Random(seed)
    visitor = _signed_up(scenario)
    while not scenario.done.is_set():
        if scenario.paused():
            time.sleep(0.2)
            continue
        status, battle = _call(visitor, "POST", "/api/battles", {})
        group = scenario.group_of(battle["id"]) if status == 201 else None
        if group is None or not scenario.may_vote(group):
            time.sleep(0.5 if status == 201 else 1.0)
            continue
        winner = rng.choice(["model_a", "model_b"])
        while True:  # until an answer comes: uvicorn may be restarting
            status, body = _call(
                visitor, "POST", f"/api/battles/{battle['id']}/vote", {"winner": winner}
            )
            if status not in (0, 502, 503):
                break
            time.sleep(0.5)
        # A vote whose first answer was lost to the outage may be on record already (409).
        assert status in (201, 409), (status, body)
        scenario.voted(group, battle["id"] if status == 201 else None)


def _outage(scenario: Scenario) -> None:
    """Once the partial group has its vote: uvicorn down for OUTAGE_SECONDS, then up."""
    shape = scenario.shape
    while not scenario.outage_due.wait(0.5):
        if scenario.done.is_set():
            return
    [web] = [p for p in shape.processes if p.name == "uvicorn" and p.popen.poll() is None]
    stopped, stopped_at = time.monotonic(), datetime.now(UTC)
    os.killpg(web.popen.pid, signal.SIGTERM)
    web.popen.wait(timeout=30)
    time.sleep(max(0.0, stopped + OUTAGE_SECONDS - time.monotonic()))
    restarting_at = datetime.now(UTC)  # nothing answers before this
    shape.start_web()
    with scenario.lock:
        scenario.outage = (stopped, time.monotonic())
        scenario.outage_wall = (stopped_at, restarting_at)


def _watcher(scenario: Scenario) -> None:
    while not scenario.done.wait(0.5):
        scenario.refresh()


def _trainer_env(tmp: Path) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return env | {
        # This checkout's client first (the trainers' virtualenv may have another installed).
        "PYTHONPATH": str(ROOT / "client"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(tmp / "hf"),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_grpo_run_completes_through_an_abandoned_battle_a_partial_group_and_an_outage(
    script: str,
    production,  # noqa: F811
    tmp_path: Path,
):
    shape, database = production
    shape.start_worker()  # the reward refits run on its default queue
    token = _api_token(shape)
    name = f"production-{Path(script).stem}"
    scenario = Scenario(shape, database, name)
    out = tmp_path / "result.json"
    log = tmp_path / f"{Path(script).stem}.log"
    threads = [
        threading.Thread(target=_guarded(scenario, work), daemon=True)
        for work in (
            lambda: _abandoner(scenario),
            lambda: _voter(scenario, 1),
            lambda: _voter(scenario, 2),
            lambda: _outage(scenario),
            lambda: _watcher(scenario),
        )
    ]
    for thread in threads:
        thread.start()
    args = [str(TRAINERS_PYTHON), str(TRAINERS / script), "--url", shape.url, "--token", token]
    args += ["--name", name, "--steps", str(STEPS), "--group-size", str(GROUP)]
    args += ["--timeout", str(TIMEOUT), "--out", str(out), "--prompts", "2", "--seed", "0"]
    try:
        with log.open("wb") as output:
            trainer = subprocess.Popen(
                args, cwd=ROOT, env=_trainer_env(tmp_path), stdout=output, stderr=subprocess.STDOUT
            )
            try:
                code = trainer.wait(timeout=RUN_SECONDS)
            except subprocess.TimeoutExpired:
                trainer.kill()
                trainer.wait()
                pytest.fail(f"{script} did not finish:\n{_read(log)}", pytrace=False)
    finally:
        scenario.done.set()
        for thread in threads:
            thread.join(timeout=90)
        print(f"\n===== {log.name} =====\n{_read(log)[-20000:]}")
    if scenario.errors:
        raise scenario.errors[0]
    assert code == 0, _read(log)

    # --- The script's account: every step, one group each, the run closed.
    result = json.loads(out.read_text())
    assert result["library"] == Path(script).stem.removeprefix("grpo_")
    assert result["run_id"] == scenario.run_id and result["closed"] is True
    steps = result["steps"]
    assert [s["step"] for s in steps] == list(range(STEPS))
    assert all(s["group_size"] == GROUP and len(s["scores"]) == GROUP for s in steps)
    assert all(s["judged"] == sum(x is not None for x in s["scores"]) for s in steps)
    scenario.refresh()
    assert len(scenario.groups) == STEPS
    members = [
        database.query("SELECT count(*) FROM arena_envcompletion WHERE submission_id = %s", g)[0][0]
        for g in scenario.groups
    ]
    # The abandoned battle's group and the last were judged whole in time (every member sent:
    # a blank one is left out of its group), the partial one in part, and trained on.
    for step in (ABANDONED, STEPS - 1):
        assert steps[step]["judged"] == members[step], (step, steps[step], members)
    assert 0 < steps[PARTIAL]["judged"] < members[PARTIAL], (steps[PARTIAL], members)

    # --- The abandoned battle: never voted; each of its completions judged by another
    # session, one of them in a battle served only after the hold had run out.
    abandoned = scenario.abandoned
    assert abandoned is not None
    assert database.query(
        "SELECT count(*) FROM arena_vote WHERE battle_id = %s", abandoned["battle"]
    ) == [(0,)]
    judged = database.query(
        """
        SELECT c.id, min(bt.created_at)
        FROM arena_envcompletion c
        JOIN arena_envbattle e ON c.id IN (e.completion_a_id, e.completion_b_id)
        JOIN arena_battle bt ON bt.id = e.battle_id
        JOIN arena_vote v ON v.battle_id = bt.id
        WHERE c.id = ANY(%s::uuid[]) AND bt.session_hash <> %s AND NOT v.flagged
        GROUP BY c.id
        """,
        list(abandoned["completions"]),
        abandoned["session"],
    )
    first_judged = {str(cid): at for cid, at in judged}
    assert set(first_judged) == abandoned["completions"]
    came_back = [
        cid
        for cid, at in first_judged.items()
        if (at - abandoned["created_at"]).total_seconds() >= HOLD
    ]
    assert came_back, (first_judged, abandoned)

    # --- The outage came while the trainer waited for the partial group's votes: its group
    # was sent before uvicorn stopped, the next one after it was up again.
    assert scenario.outage is not None
    stopped, started = scenario.outage
    assert started - stopped >= OUTAGE_SECONDS
    sent = dict(
        database.query(
            "SELECT id::text, created_at FROM arena_envsubmission WHERE run_id = %s",
            scenario.run_id,
        )
    )
    assert scenario.outage_wall is not None
    assert sent[scenario.groups[PARTIAL]] < scenario.outage_wall[0]
    assert sent[scenario.groups[PARTIAL + 1]] > scenario.outage_wall[1]

    # --- No run left open; nothing lost.
    status, listed = _env_call(shape, token, "GET", "/runs")
    assert status == 200, listed
    assert [(r["id"], r["state"], r["closed_reason"]) for r in listed["runs"]] == [
        (scenario.run_id, "closed", "trainer")
    ]
    recorded = {
        str(battle)
        for (battle,) in database.query(
            "SELECT battle_id FROM arena_vote WHERE battle_id = ANY(%s::uuid[])", scenario.cast
        )
    }
    assert recorded == set(scenario.cast)
    assert len(scenario.cast) >= 2 * STEPS - 1  # two votes judge a group of three, one a part
