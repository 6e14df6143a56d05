"""Load benchmark of pool battles and votes against the production shape (not a timed test).

    .venv/bin/python bench/votes.py [--levels 1,10,50] [--seconds 30] [--quick] [--keep-logs]

1. Starts the production shape natively (bench/shape.py): ``config.settings.production``,
   ``migrate``, ``collectstatic``, ``load_demo``, ``rate_snapshot``, ``bin/serve`` (uvicorn, two workers) and a
   Celery worker on both queues, on a PostgreSQL database and an empty Redis db of the run's own.
2. For each concurrency level, N closed-loop clients (asyncio + aiohttp, one cookie jar each,
   a browser user-agent): each opens the page once (session and CSRF cookies), accepts the terms
   (``POST /api/terms`` with ``X-CSRFToken``, as static/js/battle.js does), then repeats
   ``POST /api/battles`` -> ``POST /api/battles/<id>/vote`` for the level's duration.
3. Prints per level: sustained votes/s (acknowledged votes over the level's wall time), p50/p99
   vote and battle-start latency, errors, and whether every acknowledged vote (201) is in the
   database (rows of arena_vote counted by the acknowledged battles' ids).

The environment turns off what would refuse or flag a load generator that real visitors would
not trip: per-IP rate limits (every client here is 127.0.0.1; ARENA_RATELIMIT_ENABLE=false),
the minimum seconds before a vote (ARENA_MIN_VOTE_SECONDS=0), the proof-of-work challenge
(ARENA_CHALLENGE=false) and the daily vote caps (ARENA_VOTES_PER_SESSION_PER_DAY /
ARENA_VOTES_PER_IP_PER_DAY set very high; the caps' cache counters are still kept). Everything else is production's.

The client runs on the same machine as the server (2 cores shared): its CPU is charged to the
server's budget, so the figures are a floor for what the server alone would do. The CPU time
the uvicorn processes spend per acknowledged vote (its battle start included; PostgreSQL's
own CPU not counted) is printed too: it depends far less on what else the machine runs, and
2 cores / that time bounds the votes/s two workers could reach.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shape import (  # noqa: E402
    USER_AGENT,
    Tree,
    add_tree_arguments,
    close_trees,
    open_trees,
    stored_votes,
)

TARGET_VOTES_PER_S = 500.0
TARGET_P99_MS = 200.0
BENCH_ENV = {
    "ARENA_RATELIMIT_ENABLE": "false",
    "ARENA_MIN_VOTE_SECONDS": "0",
    "ARENA_CHALLENGE": "false",
    "ARENA_VOTES_PER_SESSION_PER_DAY": "100000000",
    "ARENA_VOTES_PER_IP_PER_DAY": "100000000",
    "RATINGS_REFRESH_DEBOUNCE_SECONDS": "5",
}


@dataclass
class Level:
    sessions: int
    seconds: float = 0.0
    stop_at: float = float("inf")
    signed_up: int = 0
    go: asyncio.Event = field(default_factory=asyncio.Event)
    vote_ms: list[float] = field(default_factory=list)
    start_ms: list[float] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


def _pct(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def _client(base: str, level: Level, index: int) -> None:
    """One visitor: the page, the terms, then battle -> vote until the level's clock stops."""
    import aiohttp

    jar = aiohttp.CookieJar(unsafe=True)  # cookies of 127.0.0.1 (an address) kept
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(
        base_url=base, cookie_jar=jar, timeout=timeout, headers={"User-Agent": USER_AGENT}
    ) as http:
        try:
            async with http.get("/") as response:
                await response.read()
                page = response.status
            csrf = next((c.value for c in jar if c.key == "csrftoken"), "")
            headers = {"X-CSRFToken": csrf, "Content-Type": "application/json"}
            async with http.post(
                "/api/terms", data=json.dumps({"accept": True}), headers=headers
            ) as response:
                await response.read()
                terms = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            level.error(f"sign-up {type(exc).__name__}")
            level.signed_up += 1
            return
        level.signed_up += 1
        if page != 200 or terms != 200:
            level.error(f"sign-up page {page} terms {terms}")
            return
        await level.go.wait()
        n = index
        while time.monotonic() < level.stop_at:
            t0 = time.perf_counter()
            try:
                async with http.post("/api/battles", data="{}", headers=headers) as response:
                    body = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                level.error(f"battle {type(exc).__name__}")
                continue
            t1 = time.perf_counter()
            if status != 201:
                level.error(f"battle {status}")
                await asyncio.sleep(0.05)
                continue
            level.start_ms.append((t1 - t0) * 1000)
            battle_id = json.loads(body)["id"]
            winner = ("model_a", "model_b", "tie", "model_a")[n % 4]
            n += 1
            t2 = time.perf_counter()
            try:
                async with http.post(
                    f"/api/battles/{battle_id}/vote",
                    data=json.dumps({"winner": winner}),
                    headers=headers,
                ) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                level.error(f"vote {type(exc).__name__}")
                continue
            t3 = time.perf_counter()
            if status != 201:
                level.error(f"vote {status}")
                continue
            level.vote_ms.append((t3 - t2) * 1000)
            level.acknowledged.append(battle_id)


async def _run_level(base: str, sessions: int, seconds: float) -> Level:
    """Sign every session up (not timed), then run them all for ``seconds``."""
    level = Level(sessions)
    tasks = [asyncio.create_task(_client(base, level, i)) for i in range(sessions)]
    deadline = time.monotonic() + 120
    while level.signed_up < sessions and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    started = time.monotonic()
    level.stop_at = started + seconds
    level.go.set()
    await asyncio.gather(*tasks)
    level.seconds = time.monotonic() - started
    return level


def _row(level: Level, stored: int) -> dict[str, object]:
    votes_per_s = len(level.acknowledged) / level.seconds if level.seconds else 0.0
    return {
        "sessions": level.sessions,
        "seconds": round(level.seconds, 1),
        "votes": len(level.acknowledged),
        "votes_per_s": votes_per_s,
        "vote_p50": _pct(level.vote_ms, 50),
        "vote_p99": _pct(level.vote_ms, 99),
        "start_p50": _pct(level.start_ms, 50),
        "start_p99": _pct(level.start_ms, 99),
        "errors": sum(level.errors.values()),
        "error_kinds": dict(level.errors),
        "stored": stored,
        "lost": len(level.acknowledged) - stored,
    }


def _measure(tree: Tree, sessions: int, seconds: float) -> dict[str, object]:
    """One level against ``tree``'s running server: its row (printed)."""
    shape = tree.shape
    cpu_before = shape.cpu_seconds()
    level = asyncio.run(_run_level(shape.url, sessions, seconds))
    cpu_after = shape.cpu_seconds()
    shape.check_alive(f"level {sessions}")
    row = _row(level, stored_votes(tree.database, level.acknowledged))
    web_cpu = cpu_after["uvicorn"] - cpu_before["uvicorn"]
    worker_cpu = cpu_after["celery-worker"] - cpu_before["celery-worker"]
    n = max(1, len(level.acknowledged))
    row["tree"] = tree.label
    row["web_cpu_ms_per_vote"] = web_cpu * 1000 / n
    row["worker_cpu_ms_per_vote"] = worker_cpu * 1000 / n
    row["load_avg_1m"] = os.getloadavg()[0]
    prefix = f"[{tree.label}] " if tree.worktree else ""
    print(
        f"{prefix}{sessions:>4} sessions: {row['votes_per_s']:.1f} votes/s, "
        f"vote p50/p99 {row['vote_p50']:.0f}/{row['vote_p99']:.0f} ms, "
        f"start p50/p99 {row['start_p50']:.0f}/{row['start_p99']:.0f} ms, "
        f"errors {row['error_kinds'] or 0}, in db {row['stored']}/{row['votes']}, "
        f"machine load (1 min) {row['load_avg_1m']:.1f}, CPU per vote (battle start "
        f"included): uvicorn {row['web_cpu_ms_per_vote']:.0f} ms, "
        f"worker {row['worker_cpu_ms_per_vote']:.0f} ms",
        flush=True,
    )
    return row


def _table(rows: list[dict[str, object]], baseline: list[dict[str, object]] | None = None) -> str:
    """The rows as a Markdown table; with ``baseline`` rows (another tree, the same run), a
    column of votes/s against the baseline's at the same level."""
    same_run = {r["sessions"]: float(r["votes_per_s"]) for r in baseline or []}  # type: ignore[arg-type]
    lines = [
        "| sessions | votes | votes/s | vs 500/s "
        + ("| vs baseline, same run " if same_run else "")
        + "| vote p50 ms | vote p99 ms "
        "| start p50 ms | start p99 ms | errors | acknowledged in db "
        "| uvicorn CPU ms per vote | load |",
        "|---:|---:|---:|---:|"
        + ("---:|" if same_run else "")
        + "---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        base = same_run.get(r["sessions"])
        vs_base = (
            ""
            if not same_run
            else (f"| {float(r['votes_per_s']) / base:.2f}x " if base else "| - ")
        )  # type: ignore[arg-type]
        lines.append(
            f"| {r['sessions']} | {r['votes']} | {r['votes_per_s']:.1f} "
            f"| {float(r['votes_per_s']) / TARGET_VOTES_PER_S:.3f}x "  # type: ignore[arg-type]
            + vs_base
            + f"| {r['vote_p50']:.0f} | {r['vote_p99']:.0f} "
            f"| {r['start_p50']:.0f} | {r['start_p99']:.0f} | {r['errors']} "
            f"| {r['stored']}/{r['votes']}{' (LOST ' + str(r['lost']) + ')' if r['lost'] else ''} "
            f"| {r['web_cpu_ms_per_vote']:.0f} | {r['load_avg_1m']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--levels", default="1,10,50", help="concurrent sessions per level")
    parser.add_argument("--seconds", type=float, default=30.0, help="duration of each level")
    parser.add_argument("--quick", action="store_true", help="levels 1,10 for 8 s each")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--keep-logs", action="store_true", help="print the process logs' paths")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    add_tree_arguments(parser, ", e.g. DATABASE_CONN_MAX_AGE=60 to compare persistent connections")
    args = parser.parse_args()
    if args.baseline:
        Tree.resolve(args.baseline)  # a bad revision ends the run before anything starts
    if args.baseline:
        Tree.resolve(args.baseline)
    levels = [int(x) for x in args.levels.split(",")]
    seconds = args.seconds
    if args.quick:
        levels, seconds = [1, 10], 8.0

    extra = dict(item.split("=", 1) for item in args.env)
    settings = BENCH_ENV | extra
    trees: list[Tree] = []
    rows: list[dict[str, object]] = []
    baseline_rows: list[dict[str, object]] = []
    try:
        current = open_trees(trees, args, "arena_bench_votes", settings, args.web_workers)
        print(f"settings for the bench: {settings}", flush=True)
        for tree in trees:
            tree.prepare()
            tree.shape.start_web()
            tree.shape.start_worker()
            asyncio.run(_run_level(tree.shape.url, 2, 2.0))  # warm-up: imports, connections
        for sessions in levels:
            for tree in trees:  # the trees' levels alternate; the other server is idle
                row = _measure(tree, sessions, seconds)
                (rows if tree is current else baseline_rows).append(row)
    finally:
        close_trees(trees, args.keep_logs)
    print()
    print(
        f"Target (2 cores): >= {TARGET_VOTES_PER_S:.0f} votes/s with vote p99 < "
        f"{TARGET_P99_MS:.0f} ms, none lost."
    )
    print(_table(rows, baseline_rows))
    if baseline_rows:
        print(f"\nThe baseline, {args.baseline}, in the same run:")
        print(_table(baseline_rows))
    best = max(rows, key=lambda r: float(r["votes_per_s"]))  # type: ignore[arg-type]
    met = (
        float(best["votes_per_s"]) >= TARGET_VOTES_PER_S  # type: ignore[arg-type]
        and float(best["vote_p99"]) < TARGET_P99_MS  # type: ignore[arg-type]
        and all(r["lost"] == 0 for r in rows)
    )
    print(
        f"Best level: {best['sessions']} sessions, {best['votes_per_s']:.1f} votes/s "
        f"= {float(best['votes_per_s']) / TARGET_VOTES_PER_S:.3f}x the target; "  # type: ignore[arg-type]
        f"target {'met' if met else 'NOT met'}; lost votes: {sum(int(r['lost']) for r in rows)}."  # type: ignore[call-overload]
    )
    if args.json:  # each row names its tree
        args.json.write_text(json.dumps(baseline_rows + rows, indent=2))


if __name__ == "__main__":
    main()
