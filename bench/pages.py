"""Benchmark of the pages a snapshot feeds: queries and render time per visit at 1M votes.

    .venv/bin/python bench/pages.py [--votes 1000000] [--quick] [--database NAME] [--reuse]

1. Recreates the database ``--database`` (default ``arena_bench_pages``) on the server
   ``DATABASE_URL`` names, migrates it and loads N anonymous voted battles with ``COPY``
   (``bench/export.py``'s loader: real MT-bench human votes, model names and answers from
   ``arena/demo_data``, drawn with replacement). ``--reuse`` keeps a database loaded before.
2. Writes a snapshot (``ratings.services.snapshot_refresh``, the rating task's service; past
   ``RATINGS_STREAM_THRESHOLD`` votes its streamed path) and prints its time.
3. For each page (the leaderboard, another category without style control, its JSON and CSV
   downloads, /transparency, a model page) visits it through Django's test client (the whole
   middleware stack, no network) and records the queries of one visit and the median and 99th
   percentile of the render time, in two states:
   - cold: the cache emptied before each visit (the first visit after a new snapshot);
   - warm: visits after the first (every other visit until the next snapshot).
4. The anchor, in the same run: what the pages computed from the votes on every visit before
   the per-snapshot figures (``arena.transparency.models_served`` for /transparency, and
   ``ratings.model_pages.model_opponents_counted`` for a model page, the opponents' records
   counted from the rated votes), timed alone; the page's cost then was at least that plus
   the warm render. Ratios: anchor / warm and cold / warm.

The cache is the one the settings name: Redis when ``REDIS_URL`` is set (emptied first: give
the benchmark a Redis database of its own), local memory otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE = "arena_bench_pages"
WARM_VISITS = 60
COLD_VISITS = 8
ANCHOR_RUNS = 3


def database_urls(name: str) -> tuple[str, str]:
    """(the server's maintenance database, the benchmark's database) from DATABASE_URL."""
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        sys.exit(f"DATABASE_URL must name a PostgreSQL server, not {parts.scheme}")
    return urlunsplit(parts._replace(path="/postgres")), urlunsplit(parts._replace(path=f"/{name}"))


def prepare(name: str, n: int) -> str:
    """A migrated database holding ``n`` voted battles; its URL."""
    import psycopg

    server, url = database_urls(name)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings.local"}
    env.pop("REDIS_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity=0"], cwd=ROOT, env=env, check=True
    )
    start = time.perf_counter()
    loader = [sys.executable, str(ROOT / "bench" / "export.py"), "--load", str(n), "--url", url]
    subprocess.run(loader, cwd=ROOT, env=env, check=True)
    print(f"loaded {n:,} votes in {time.perf_counter() - start:.0f} s", flush=True)
    return url


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


def measure(visits: int, visit: Callable[[], int], before: Callable[[], None]) -> dict[str, float]:
    """Median and p99 milliseconds of ``visit`` over ``visits`` calls, and its last query count."""
    samples = []
    queries = 0
    for _ in range(visits):
        before()
        start = time.perf_counter()
        queries = visit()
        samples.append(time.perf_counter() - start)
    median, p99 = _ms(samples)
    return {"median": median, "p99": p99, "queries": queries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--votes", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="50,000 votes")
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--reuse", action="store_true", help="measure the loaded database again")
    args = parser.parse_args()
    n = 50_000 if args.quick else args.votes
    url = database_urls(args.database)[1] if args.reuse else prepare(args.database, n)

    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.local"
    import django

    django.setup()
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from arena.models import ArenaModel, Vote
    from arena.transparency import models_served
    from ratings import services
    from ratings.model_pages import model_opponents_counted

    votes = Vote.objects.count()
    print(f"database {args.database}: {votes:,} votes; cache {cache.__class__.__name__}")
    start = time.perf_counter()
    snapshot = services.snapshot_refresh(force=True).snapshot
    assert snapshot is not None
    print(
        f"snapshot #{snapshot.pk} from {snapshot.n_votes:,} rated votes in "
        f"{time.perf_counter() - start:.1f} s (records and served summary included)"
    )
    model = ArenaModel.objects.filter(is_public=True).order_by("slug").first()
    assert model is not None
    categories = [c["key"] for c in snapshot.payload["categories"]]
    other = next((c for c in categories if c != "overall"), "overall")
    pages = {
        "leaderboard": "/leaderboard",
        f"leaderboard {other}, style off": f"/leaderboard?category={other}&style=off",
        "leaderboard.json": "/leaderboard.json",
        "leaderboard.csv": "/leaderboard.csv",
        "transparency": "/transparency",
        f"model page ({model.slug})": f"/models/{model.slug}",
    }
    client = Client(HTTP_HOST="localhost")

    def visitor(path: str) -> Callable[[], int]:
        def visit() -> int:
            with CaptureQueriesContext(connection) as captured:
                response = client.get(path)
            assert response.status_code == 200, (path, response.status_code)
            return len(captured)

        return visit

    anchors: dict[str, float] = {}
    for label, compute in (
        ("transparency", models_served),
        (f"model page ({model.slug})", lambda: model_opponents_counted(model=model)),
    ):
        anchors[label] = measure(ANCHOR_RUNS, lambda c=compute: (c(), 0)[1], lambda: None)["median"]

    rows = []
    for label, path in pages.items():
        visit = visitor(path)
        cold = measure(COLD_VISITS, visit, cache.clear)
        visit()  # the first visit of the snapshot fills the cache
        warm = measure(WARM_VISITS, visit, lambda: None)
        rows.append((label, cold, warm, anchors.get(label)))
        print(f"  {label}: cold {cold}, warm {warm}", flush=True)

    print()
    print(
        f"{votes:,} votes, snapshot #{snapshot.pk}; {COLD_VISITS} cold visits (cache emptied "
        f"before each), {WARM_VISITS} warm ones; anchor median of {ANCHOR_RUNS}"
    )
    print()
    print(
        "| page | queries cold | queries warm | cold ms median / p99 | warm ms median / p99 "
        "| cold / warm | anchor: counted from votes, ms | anchor / warm |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, cold, warm, anchor in rows:
        anchor_cells = (
            f"{anchor:,.0f} | {anchor / warm['median']:,.0f}x" if anchor is not None else "– | –"
        )
        print(
            f"| {label} | {cold['queries']:.0f} | {warm['queries']:.0f} | "
            f"{cold['median']:.1f} / {cold['p99']:.1f} | {warm['median']:.1f} / "
            f"{warm['p99']:.1f} | {cold['median'] / warm['median']:.1f}x | {anchor_cells} |"
        )
    print()
    print("anchor: the per-visit count the page ran before the per-snapshot figures, timed")
    print("alone (the old page cost at least that plus its render).")


if __name__ == "__main__":
    main()
