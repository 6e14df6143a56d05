"""The fragility audit's cost inside a snapshot refit from PostgreSQL, at LMArena's scale.

    .venv/bin/python bench/fragility_db.py [--votes 1000000] [--keep]

1. A database of its own (``arena_bench_fragility`` on the server ``DATABASE_URL`` names) is
   migrated and loaded with N anonymous voted battles by ``bench/export.py``'s loader (the
   demo's models, prompts and answers resampled, one vote every 30 seconds).
2. Two refits of the same votes, each in a child process (``snapshot_refresh(force=True)``,
   what the worker runs; past ``RATINGS_STREAM_THRESHOLD`` votes the streamed path): without
   the audit (``FRAGILITY_TOP`` 0) and with it (the default: the adjacent pairs of the top ten
   and the leader, overall view, both styles). Wall time and peak resident memory of each.
3. Prints the audit's time (the difference) against the budget: at most the refit's own time
   again (ratio at most 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATABASE = "arena_bench_fragility"

CHILD = """
import json, os, resource, time, django
django.setup()
from ratings import services
services.FRAGILITY_TOP = int(os.environ["BENCH_FRAGILITY_TOP"])
started = time.perf_counter()
snapshot = services.snapshot_refresh(force=True).snapshot
overall = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")
audited = [s for s, r in overall["results"].items() if r and r.get("fragility")]
print(json.dumps({"seconds": time.perf_counter() - started, "votes": snapshot.n_votes,
                  "streamed": bool(snapshot.params.get("streamed")), "audited": audited,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _refit(url: str, top: int) -> dict[str, object]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "BENCH_FRAGILITY_TOP": str(top),
    }
    env.pop("REDIS_URL", None)
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    out, _ = process.communicate()
    if process.returncode:
        sys.exit(f"the refit failed ({process.returncode})")
    figures: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--votes", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args()
    import psycopg

    from bench import export

    export.DATABASE = DATABASE
    admin, url = export.database_urls()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')
    try:
        env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings.local"}
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--verbosity=0"], cwd=ROOT, env=env, check=True
        )
        os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="config.settings.local")
        started = time.perf_counter()
        export.load(url, args.votes)
        print(f"loaded in {time.perf_counter() - started:.0f} s", flush=True)
        plain = _refit(url, 0)
        print(f"refit without the audit: {plain}", flush=True)
        audited = _refit(url, 10)
        print(f"refit with the audit:    {audited}", flush=True)
    finally:
        if not args.keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    spent = float(audited["seconds"]) - float(plain["seconds"])  # type: ignore[arg-type]
    ratio = spent / float(plain["seconds"])  # type: ignore[arg-type]
    print()
    print(
        f"{args.votes:,} votes in PostgreSQL (streamed: {plain['streamed']}); refit "
        f"{plain['seconds']:.1f} s ({plain['peak_mb']:.0f} MiB peak); with the audit "
        f"{audited['seconds']:.1f} s ({audited['peak_mb']:.0f} MiB peak; views audited: "
        f"{audited['audited']}); the audit {spent:.1f} s = {ratio:.2f} x the refit "
        f"(budget: at most 1): {'met' if ratio <= 1 else 'missed'}"
    )


if __name__ == "__main__":
    main()
