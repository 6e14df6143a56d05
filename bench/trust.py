"""Benchmark of the leaderboard's trust computations at 1M votes in PostgreSQL, against the refit.

    .venv/bin/python bench/trust.py [--votes 1000000] [--quick] [--database NAME] [--reuse]
                                    [--keep] [--only flag_voters,cohorts,refit] [--profile NAME]

1. Recreates the database ``--database`` (default ``arena_bench_trust``) on the server
   ``DATABASE_URL`` names, migrates it and loads N anonymous voted battles with ``COPY``
   (``bench/export.py``'s loader: real MT-bench human votes, model names, answers and style
   counts from ``arena/demo_data``, drawn with replacement; one vote every 30 s from
   2026-01-01; 100,000 sessions of about 10 votes each, spread over the whole period; 80,000
   address hashes, 20,000 of them shared by two sessions; user-agent classes ``browser`` and
   ``mobile``). ``--reuse`` measures a database loaded before (``--keep`` keeps it).
2. Runs each computation in a child process of its own, so that its peak resident memory
   (``ru_maxrss`` from ``os.wait4``) is its own; wall and CPU time are taken inside the child
   around the call alone (Django's start-up and the imports excluded, their memory printed
   in brackets):
   - ``flag_voters``: ``ratings.voters.voters_flag_run(dry_run=True)``, what ``manage.py
     flag_voters`` and its periodic task run (the per-voter and per-source tests of
     ``ratings.engine.anomaly``);
   - ``cohorts``: ``ratings.cohorts.cohorts_quarantine_run(dry_run=True)``, the burst test
     every refit runs first (``ratings.engine.cohorts``);
   - ``refit`` (the anchor): ``ratings.services.snapshot_refresh(force=True)`` with
     ``RATINGS_COHORT_TEST=false``, the snapshot the defences guard (past
     ``RATINGS_STREAM_THRESHOLD``, its streamed Parquet path).
3. Prints the table against the targets (each trust computation within 30 s and 1 GB peak)
   and against the anchor (time and peak as a ratio of the refit's in the same run), and a
   digest of each computation's result (what it flagged or quarantined), so that two runs on
   the same votes can be compared.

4. Then, with no database: the held-out step of ``flag_voters`` (``held_out_expectations``)
   per tested voter at M models (``--models``, default 6, 50 and 150; 2,000 synthetic voters
   of 20 votes each, the engine alone), as it runs (from 16 models, the k x k low-rank step
   where it is exact) against the dense M x M pseudo-inverse alone (``_LowRank`` switched
   off), and whether both give the same steps: the loaded votes have the demo's 6 models, an
   arena like LMArena's has over a hundred.

``--profile NAME`` runs that computation once under cProfile in its child and prints the
functions with the most cumulative time instead of the table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE = "arena_bench_trust"
COMPUTATIONS = ("flag_voters", "cohorts", "refit")
ANCHOR = "refit"
TARGET_SECONDS = 30.0
TARGET_PEAK_MB = 1000.0  # 10^6 bytes


def database_urls(name: str) -> tuple[str, str]:
    """(the server's maintenance database, the benchmark's database) from DATABASE_URL."""
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        sys.exit(f"DATABASE_URL must name a PostgreSQL server, not {parts.scheme}")
    return urlunsplit(parts._replace(path="/postgres")), urlunsplit(parts._replace(path=f"/{name}"))


def _env(url: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings.local"}
    env.pop("REDIS_URL", None)  # the refit's cache in local memory: nothing shared to empty
    return env


def prepare(name: str, n: int) -> str:
    """A migrated database holding ``n`` voted battles; its URL."""
    import psycopg

    server, url = database_urls(name)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = _env(url)
    manage = [sys.executable, "manage.py", "migrate", "--verbosity=0"]
    subprocess.run(manage, cwd=ROOT, env=env, check=True)
    start = time.perf_counter()
    # In a child: the parent stays small, and the measured children start from that size
    # (Linux keeps ru_maxrss across fork and exec).
    loader = [sys.executable, str(ROOT / "bench" / "export.py"), "--load", str(n), "--url", url]
    subprocess.run(loader, cwd=ROOT, env=env, check=True)
    print(f"loaded {n:,} votes in {time.perf_counter() - start:.0f} s", flush=True)
    return url


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def _flag_voters() -> dict[str, Any]:
    from ratings.voters import voters_flag_run

    run = voters_flag_run(dry_run=True)
    flagged = [
        [row.voter, f"{row.p_value:.6g}", row.test]
        for row in run.voters.sort_values("voter").itertuples()
    ]
    return {
        "result": f"{run.n_votes_tested:,} votes, {run.n_voters_tested:,} voters tested, "
        f"{len(run.voters)} flagged ({len(run.flagged_voter_ids)} sessions, "
        f"{len(run.votes):,} votes)",
        "digest": _digest([flagged, run.flagged_voter_ids, run.n_voters_tested]),
    }


def _cohorts() -> dict[str, Any]:
    from ratings.cohorts import cohorts_quarantine_run

    run = cohorts_quarantine_run(dry_run=True)
    bursts = [
        [b.model, b.window_hours, b.window_start.isoformat(), b.n_votes, f"{b.z_before:.6g}"]
        for b in run.bursts
    ]
    return {
        "result": f"{run.n_votes:,} votes, {run.windows_tested:,} windows tested, "
        f"{len(run.bursts)} bursts, {len(run.quarantined_ids):,} votes quarantined",
        "digest": _digest([bursts, run.quarantined_ids, run.windows_tested]),
    }


def _refit() -> dict[str, Any]:
    from ratings.services import snapshot_refresh

    snapshot = snapshot_refresh(force=True).snapshot
    assert snapshot is not None  # noqa: S101  (force writes one)
    return {
        "result": f"snapshot of {snapshot.n_votes:,} votes",
        "digest": _digest(snapshot.payload["categories"][0]),
    }


def child(name: str, profile: bool) -> None:
    """One computation, as its command runs it; prints its figures as JSON."""
    import django

    django.setup()
    import resource

    # What the computations import on their first call (the fit's libraries), before the clock.
    import scipy.stats  # noqa: F401

    import ratings.cohorts
    import ratings.services
    import ratings.voters  # noqa: F401

    run = {"flag_voters": _flag_voters, "cohorts": _cohorts, "refit": _refit}[name]
    setup_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(run)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        print(json.dumps({"seconds": 0, "cpu": 0, "setup_mb": setup_mb}))
        return
    start, cpu = time.perf_counter(), time.process_time()
    figures = run()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({**figures, "seconds": seconds, "cpu": cpu, "setup_mb": setup_mb}))


def run_child(url: str, name: str, *, profile: bool = False) -> dict[str, Any]:
    """One computation in a child process: its figures and its peak resident MiB."""
    env = _env(url)
    if name == ANCHOR:
        env["RATINGS_COHORT_TEST"] = "false"  # the refit alone, without the burst test
    command = [sys.executable, __file__, "--child", name] + (["--profile", name] if profile else [])
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=sys.stderr if profile else None
    )
    assert process.stdout is not None  # noqa: S101
    output = process.stdout.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{name} failed:\n{output[-3000:]}")
    figures = json.loads(output.strip().splitlines()[-1])
    return {**figures, "peak_mb": usage.ru_maxrss * 1024 / 1e6}


def held_out_by_models(sizes: list[int], voters: int = 2_000, votes_each: int = 20) -> None:
    """The held-out step per tested voter at each number of models, low-rank and dense."""
    from unittest import mock

    import numpy as np
    import pandas as pd

    from ratings.engine import anomaly

    print()
    print(f"held-out step of flag_voters, {voters:,} voters x {votes_each} votes (synthetic):")
    print()
    print(
        "| models | as run, us/voter | dense step alone, us/voter | dense / as run | same steps |"
    )
    print("|---:|---:|---:|---:|---|")
    for m in sizes:
        rng = np.random.default_rng(m)
        n = voters * votes_each
        a = rng.integers(0, m, n)
        b = (a + rng.integers(1, m, n)) % m
        names = pd.Index([f"m{i:03d}" for i in range(m)], dtype=object)
        frame = pd.DataFrame(
            {
                "voter": pd.Categorical.from_codes(
                    np.repeat(np.arange(voters), votes_each),
                    categories=pd.Index([f"v{i}" for i in range(voters)], dtype=object),
                ),
                "model_a": pd.Categorical.from_codes(a, categories=names),
                "model_b": pd.Categorical.from_codes(b, categories=names),
                "winner": rng.choice(["model_a", "model_b", "tie"], n),
            }
        )
        logits = {name: float(x) for name, x in zip(names, rng.normal(0, 0.5, m), strict=True)}
        expectations = anomaly.model_expectations(frame["model_a"], frame["model_b"], logits=logits)
        started = time.perf_counter()
        low = anomaly.held_out_expectations(frame, expectations)
        low_s = time.perf_counter() - started
        with mock.patch.object(anomaly._LowRank, "of", return_value=None):
            started = time.perf_counter()
            dense = anomaly.held_out_expectations(frame, expectations)
            dense_s = time.perf_counter() - started
        same = np.allclose(low.design[0], dense.design[0], rtol=1e-9, atol=1e-12)
        print(
            f"| {m} | {low_s * 1e6 / voters:,.0f} | {dense_s * 1e6 / voters:,.0f} | "
            f"{dense_s / low_s:,.1f}x | {'yes' if same else 'no'} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--votes", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="50,000 votes")
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--reuse", action="store_true", help="measure the loaded database again")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--only", default=",".join(COMPUTATIONS))
    parser.add_argument("--profile", choices=COMPUTATIONS, help="cProfile one computation")
    parser.add_argument(
        "--models", default="6,50,150", help="the held-out step at these numbers of models (0: no)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, bool(args.profile))
        return
    n = 50_000 if args.quick else args.votes
    server, url = database_urls(args.database)
    if not args.reuse:
        prepare(args.database, n)
    import psycopg

    with psycopg.connect(url) as conn:
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        votes = conn.execute("SELECT count(*) FROM arena_vote").fetchone()[0]  # type: ignore[index]
        print(f"database {args.database}: {size.fetchone()[0]}, {votes:,} votes")  # type: ignore[index]
    try:
        if args.profile:
            run_child(url, args.profile, profile=True)
            return
        results = {}
        for name in args.only.split(","):
            results[name] = run_child(url, name)
            print(f"  {name}: {results[name]}", flush=True)
    finally:
        if not args.keep and not args.reuse:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{args.database}"')
    anchor = results.get(ANCHOR)
    print()
    print(
        f"{votes:,} votes in PostgreSQL; targets: each trust computation <= {TARGET_SECONDS:.0f} s"
        f" and <= {TARGET_PEAK_MB:,.0f} MB peak; anchor: the {ANCHOR} in the same run"
    )
    print()
    print(
        "| computation | wall s | CPU s | peak MB (after start-up) | target met "
        "| wall / refit | peak / refit | result | digest |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---|---|")
    for name, f in results.items():
        met = f["seconds"] <= TARGET_SECONDS and f["peak_mb"] <= TARGET_PEAK_MB
        versus = (
            f"{f['seconds'] / anchor['seconds']:.2f}x | {f['peak_mb'] / anchor['peak_mb']:.2f}x"
            if anchor
            else "– | –"
        )
        print(
            f"| {name} | {f['seconds']:.1f} | {f['cpu']:.1f} | {f['peak_mb']:,.0f} "
            f"({f['setup_mb']:,.0f}) | {'–' if name == ANCHOR else 'yes' if met else 'no'}"
            f" | {versus} | {f['result']} | {f['digest']} |"
        )
    print()
    print("wall s, CPU s: the call alone in its child (Django's start-up and the imports")
    print("excluded; CPU is the child's own, PostgreSQL's not counted); peak: the child's")
    print("ru_maxrss in MB (10^6 bytes), its size before the call in brackets.")
    sizes = [int(x) for x in args.models.split(",") if int(x) > 1]
    if sizes:
        held_out_by_models(sizes)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
