"""Memory of each web worker of the production shape, against a baseline tree in the same run.

    .venv/bin/python bench/memory.py [--baseline REV | --no-baseline] [--visitors 12]
        [--tokens 26] [--delay 0.02] [--keep-logs]

For each tree, the baseline's first (a git worktree of ``--baseline``, default 85508db, the
tree whose workers loaded the tokenizer through bpe-openai's Python package), then this
checkout's, in turn (never both at once, so that neither's pages are charged to the other):

1. A PostgreSQL database of its own on the server of ``DATABASE_URL``, named after that URL's
   database (``<name>_memory_<hex>``, dropped at the end): ``migrate``, ``collectstatic``,
   ``load_demo`` and two live models (``manage.py add_model``) answered by the loopback fake
   upstream (``arena/tests/fake_openai.py``, its own process: ``--tokens`` chunks ``--delay``
   seconds apart), all in ``config.settings.production``.
2. ``bin/serve`` as the image runs it (uvicorn, ``ARENA_WEB_WORKERS=2``), with ``REDIS_URL``'s
   db as cache, channel layer and broker (it must be empty at the start; it is flushed after
   each tree). No Celery worker: the tasks a vote queues wait in the broker, and what is
   measured is the web workers.
3. Each worker's memory from ``/proc/<pid>/smaps_rollup`` once both answer (idle), and again
   after ``--visitors`` visitors (a new connection per HTTP request, so that both workers serve
   some; a websocket each, spread by the kernel over the two) each played what the page does:
   the page, the terms, the proof-of-work challenge, a pool battle and its vote, a live battle
   (``start`` frame to ``turn_end``) and its vote. By then a worker has read the pool's answers
   into its cache and counted their style, counted a live turn's answers and summed a vote's.

Figures per worker: RSS (every page it maps, those it shares with the other worker or the
master counted whole), PSS (shared pages divided among the processes sharing them: the sum over
processes is the machine's use) and USS (its private pages only: what stopping it would free).
The target, at most 250 MB per web worker, is read against each; the ratio and the difference
to the baseline's figure of the same kind, measured in the same run, are printed.

Settings changed from production for the run (printed): bench/battles.py's (no per-address
limits, no minimum seconds before a vote, very high daily vote caps), no mixed battles
(``ARENA_BRIDGE_SHARE=0``: the pool battle is a pool one) and no cap on one address's sockets
(``ARENA_WS_MAX_PER_ADDRESS``: every visitor here is 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.battles import (  # noqa: E402
    BENCH_ENV,
    LIVE_MODELS,
    UPSTREAM,
    Level,
    _battle,
    _sign_up,
    worker_pids,
)
from bench.shape import (  # noqa: E402
    BIN,
    USER_AGENT,
    Database,
    Shape,
    Tree,
    remove_worktree,
    worktree_add,
)

TARGET_MB = 250.0
# The tree before the style counts' tokenizer was loaded without bpe-openai's Python package.
DEFAULT_BASELINE = "85508db"
# Every visitor is 127.0.0.1: its sockets are under one address's cap.
MEMORY_ENV = BENCH_ENV | {"ARENA_BRIDGE_SHARE": "0", "ARENA_WS_MAX_PER_ADDRESS": "10000"}
FIGURES = ("rss", "pss", "uss")


@dataclass(frozen=True)
class Memory:
    """One process's memory, MB (from smaps_rollup)."""

    rss: float
    pss: float
    uss: float
    anonymous: float

    @classmethod
    def of(cls, pid: int) -> Memory:
        kib: dict[str, int] = {}
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    kib[parts[0].rstrip(":")] = int(parts[1])
        return cls(
            rss=kib["Rss"] / 1024,
            pss=kib["Pss"] / 1024,
            uss=(kib["Private_Clean"] + kib["Private_Dirty"]) / 1024,
            anonymous=kib["Anonymous"] / 1024,
        )


@dataclass
class Result:
    label: str
    idle: list[Memory] = field(default_factory=list)
    loaded: list[Memory] = field(default_factory=list)
    master: Memory | None = None
    pool_votes: int = 0
    live_votes: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def worst(self, figure: str) -> float:
        return max(getattr(m, figure) for m in self.loaded)


# --- the visitors ----------------------------------------------------------------------------
async def _vote(http: object, headers: dict[str, str], battle_id: str, level: Level) -> bool:
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    async with http.post(
        f"/api/battles/{battle_id}/vote", data=json.dumps({"winner": "tie"}), headers=headers
    ) as response:
        await response.read()
        if response.status != 201:
            level.errors[f"vote {response.status}"] += 1
            return False
        return True


async def _visitor(base: str, level: Level, index: int, counts: dict[str, int]) -> None:
    """A pool battle and its vote, then a live battle and its vote, as the page plays them."""
    import aiohttp

    async with aiohttp.ClientSession(
        base_url=base,
        cookie_jar=aiohttp.CookieJar(unsafe=True),
        timeout=aiohttp.ClientTimeout(total=120),
        headers={"User-Agent": USER_AGENT},
        connector=aiohttp.TCPConnector(limit=0, force_close=True),
    ) as http:
        try:
            headers, socket = await _sign_up(http, base)
        except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
            level.errors[f"sign-up {exc}"[:80]] += 1
            return
        try:
            async with http.post("/api/battles", data="{}", headers=headers) as response:
                body = await response.read()
                if response.status == 201:
                    if await _vote(http, headers, json.loads(body)["id"], level):
                        counts["pool"] += 1
                else:
                    level.errors[f"pool battle {response.status}"] += 1
            prompt = f"Visitor {index}: count to ten in words, please."
            outcome = await _battle(socket, prompt, level)
            if outcome is not None and await _vote(http, headers, outcome[0], level):
                counts["live"] += 1
        except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
            level.errors[f"{type(exc).__name__}"] += 1
        finally:
            await socket.close()  # type: ignore[attr-defined]


async def _drive(base: str, visitors: int) -> tuple[dict[str, int], dict[str, int]]:
    level = Level(visitors, force_close=True)
    counts = {"pool": 0, "live": 0}
    await asyncio.wait_for(
        asyncio.gather(*(_visitor(base, level, i, counts) for i in range(visitors))), timeout=300
    )
    return counts, dict(level.errors)


# --- one tree ------------------------------------------------------------------------------------
def _redis_empty(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.dbsize()) == 0
    finally:
        client.close()


def _redis_flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def measure(label: str, root: Path, args: argparse.Namespace, upstream_url: str) -> Result:
    """Set up ``root``'s production shape on a database of its own, serve, drive, measure."""
    prefix = (urlsplit(args.database_url).path.lstrip("/") or "arena") + "_memory"
    database = Database(prefix)
    shape = Shape(database.url, args.redis_url, MEMORY_ENV, web_workers=2, root=root)
    result = Result(label)
    try:
        started = time.monotonic()
        shape.manage("migrate", "--noinput")
        shape.manage("collectstatic", "--noinput")
        shape.manage("load_demo")
        for slug in LIVE_MODELS:
            shape.manage(
                "add_model",
                f"--slug={slug}",
                f"--provider-url={upstream_url}",
                f"--upstream-model={slug}",
            )
        shape.start_web()
        pids = sorted(worker_pids(shape))
        if len(pids) != 2:
            raise RuntimeError(f"expected 2 uvicorn workers, found {pids}")
        time.sleep(2)  # both workers past their start-up (the first to answer may be one)
        result.idle = [Memory.of(pid) for pid in pids]
        counts, result.errors = asyncio.run(_drive(shape.url, args.visitors))
        shape.check_alive("the visitors played")
        result.pool_votes, result.live_votes = counts["pool"], counts["live"]
        result.loaded = [Memory.of(pid) for pid in pids]
        master = next(popen.pid for name, popen, _ in shape.processes if name == "uvicorn")
        result.master = Memory.of(master)
        print(
            f"{label}: database {database.name}, {time.monotonic() - started:.0f} s, "
            f"{result.pool_votes} pool and {result.live_votes} live battles voted, "
            f"errors {result.errors or 'none'}" + (f", logs {shape.tmp}" if args.keep_logs else ""),
            flush=True,
        )
    except BaseException:
        print(f"{label}: failed; process logs kept in {shape.tmp}", flush=True)
        raise
    else:
        if not args.keep_logs:
            shutil.rmtree(shape.tmp, ignore_errors=True)
    finally:
        shape.stop()
        database.drop()
        _redis_flush(args.redis_url)
    return result


# --- the report -----------------------------------------------------------------------------------
def table(results: list[Result]) -> str:
    lines = [
        f"{'tree':<28} {'process':<10} {'when':<6} {'RSS':>6} {'PSS':>6} {'USS':>6} {'anon':>6}"
    ]
    for result in results:
        rows: list[tuple[str, str, Memory]] = []
        for number, (idle, loaded) in enumerate(zip(result.idle, result.loaded, strict=True), 1):
            rows += [(f"worker {number}", "idle", idle), (f"worker {number}", "after", loaded)]
        if result.master is not None:
            rows.append(("master", "after", result.master))
        for process, when, m in rows:
            lines.append(
                f"{result.label:<28} {process:<10} {when:<6} {m.rss:>6.0f} {m.pss:>6.0f} "
                f"{m.uss:>6.0f} {m.anonymous:>6.0f}"
            )
    return "\n".join(lines)


def summary(current: Result, baseline: Result | None) -> str:
    lines = []
    for figure in FIGURES:
        worst = current.worst(figure)
        verdict = "met" if worst <= TARGET_MB else "NOT met"
        line = (
            f"{figure.upper()} per web worker (the larger of the two, after the visitors): "
            f"{worst:.0f} MB, target <= {TARGET_MB:g} MB {verdict}"
        )
        if baseline is not None:
            anchor = baseline.worst(figure)
            line += (
                f"; baseline {anchor:.0f} MB, {worst / anchor:.2f}x, {anchor - worst:+.0f} MB saved"
            )
        lines.append(line)
    return "\n".join(lines)


def _start_upstream(tokens: int, delay: float) -> tuple[subprocess.Popen[str], str]:
    upstream = subprocess.Popen(
        [str(BIN / "python"), "-c", UPSTREAM.format(root=str(ROOT), tokens=tokens, delay=delay)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert upstream.stdout is not None
    return upstream, f"http://127.0.0.1:{int(upstream.stdout.readline())}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--baseline",
        default=DEFAULT_BASELINE,
        metavar="REV",
        help=f"the anchor tree, measured first in the same run (default {DEFAULT_BASELINE})",
    )
    parser.add_argument("--no-baseline", action="store_true", help="this checkout only")
    parser.add_argument("--visitors", type=int, default=12, help="visitors who each play both")
    parser.add_argument("--tokens", type=int, default=26, help="content chunks per live answer")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument("--keep-logs", action="store_true", help="keep the process logs")
    args = parser.parse_args()
    args.database_url = os.environ.get("DATABASE_URL", "")
    args.redis_url = os.environ.get("REDIS_URL", "")
    if not args.database_url.startswith("postgres") or not args.redis_url.startswith("redis"):
        raise SystemExit("set DATABASE_URL (a PostgreSQL server) and REDIS_URL (an empty db)")
    if not _redis_empty(args.redis_url):
        raise SystemExit(f"{args.redis_url} is not empty: name an empty Redis db of your own")
    baseline_commit = None if args.no_baseline else Tree.resolve(args.baseline)[:12]

    started = time.monotonic()
    upstream, upstream_url = _start_upstream(args.tokens, args.delay)
    worktree: Path | None = None
    results: list[Result] = []
    try:
        print(f"settings changed for the bench: {MEMORY_ENV}", flush=True)
        if baseline_commit is not None:
            worktree = worktree_add(baseline_commit)
            results.append(measure(f"baseline {baseline_commit}", worktree, args, upstream_url))
        results.append(measure("this checkout", ROOT, args, upstream_url))
    finally:
        if worktree is not None:
            remove_worktree(worktree)
        upstream.send_signal(signal.SIGTERM)
        upstream.wait(timeout=15)
    current = results[-1]
    baseline = results[0] if len(results) > 1 else None
    print()
    print(
        f"Web workers' memory, MB, from /proc/<pid>/smaps_rollup: idle = both workers serving, "
        f"nothing played; after = {args.visitors} visitors each played a pool battle + vote "
        f"and a live battle + vote. USS = Private_Clean + Private_Dirty; anon = Anonymous. "
        f"{time.monotonic() - started:.0f} s in all."
    )
    print(table(results))
    print()
    print(summary(current, baseline))
    print(
        f"machine load (1 min) at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
        f"(memory figures depend little on it)."
    )
    if current.pool_votes == 0 or current.live_votes == 0:
        raise SystemExit("no pool or no live battle was voted: the figures are not of the walk")


if __name__ == "__main__":
    main()
