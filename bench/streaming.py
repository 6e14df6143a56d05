"""Benchmark of live-battle streaming: relay overhead per token and memory per battle.

    .venv/bin/python bench/streaming.py [--battles 100,500] [--rate 10] [--seconds 40]
        [--ramp-concurrency 25] [--ws-deflate on|off] [--workers 1] [--database-url URL]

Three processes on loopback, started and stopped by this script:

1. the fake OpenAI-compatible upstream (``arena/tests/fake_openai.py``), every token of which
   is the CLOCK_MONOTONIC time of its emission, at a fixed ``--rate`` tokens per second per
   answer (one token per SSE chunk);
2. the arena's ASGI app under uvicorn (``--workers`` processes, default one; uvloop, httptools,
   websockets-sansio, as docker-compose runs it), with DEBUG off, the database of ``--database-url`` (default
   ``$DATABASE_URL``, else SQLite in a temporary directory), and the Redis channel layer when
   Redis answers at ``$REDIS_URL`` (tokens never pass through the layer anyway);
3. this script (on uvloop), which opens N websocket clients, each with its own session,
   ``--ramp-concurrency`` at a time, starts a live battle on each and reads every frame.

Relay overhead of a token = its arrival at the client minus its emission at the upstream, over
tokens emitted while all N battles were streaming (the ramp excluded; "p99 all" includes it).
CLOCK_MONOTONIC is system-wide on Linux, so the three processes share it: no clock skew.
Memory per battle = (peak RSS of the server's process tree during the run - that before) / N.

Target (on 2 cores): p99 overhead under 20 ms at 500 concurrent battles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TARGET_P99_MS = 20.0

UPSTREAM = r"""
import asyncio, sys
sys.path.insert(0, {root!r})
from arena.tests.fake_openai import FakeModel, FakeUpstream
try:
    import uvloop; uvloop.install()
except ImportError:
    pass

async def main():
    upstream = FakeUpstream(default=FakeModel(tokens={tokens}, delay={delay}, stamp=True),
                            record=False)
    await upstream.serve()
    print(upstream.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""

SESSIONS = r"""
from django.contrib.sessions.backends.db import SessionStore
keys = []
for i in range(TOTAL):
    s = SessionStore(); s["arena_voter_id"] = f"bench-{i}"; s.create(); keys.append(s.session_key)
print("KEYS", " ".join(keys))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tree_rss_kib(pid: int) -> int:
    """RSS of a process and its descendants (uvicorn's workers under ``--workers``)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += rss_kib(current)
            with open(f"/proc/{current}/task/{current}/children") as handle:
                todo.extend(int(child) for child in handle.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def redis_url() -> str:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except Exception:
        return ""
    return url


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Battle:
    """One websocket client running one live battle."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.samples: list[tuple[int, int]] = []  # (emitted ns, received ns)
        self.first_delta_ns = 0
        self.last_delta_ns = 0
        self.done = False
        self.state = ""

    async def run(self, url: str, gate: asyncio.Semaphore, stop_early: bool = False) -> None:
        import websockets

        headers = {"Cookie": f"sessionid={self.key}", "Origin": "http://127.0.0.1"}
        # The gate bounds the battles being opened and started at once (the ramp): a visitor
        # load arrives over time, and a start costs a few database writes.
        async with gate:
            ws = await websockets.connect(
                url, additional_headers=headers, max_size=None, open_timeout=120, ping_interval=None
            )
            await ws.send(json.dumps({"type": "start", "prompt": "Count for the benchmark."}))
            first = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if first["type"] != "turn_start":
                raise RuntimeError(f"battle did not start: {first}")
        samples = self.samples
        async with ws:
            async for raw in ws:
                now = time.monotonic_ns()
                frame = json.loads(raw)
                kind = frame["type"]
                if kind == "delta":
                    if not self.first_delta_ns:
                        self.first_delta_ns = now
                    self.last_delta_ns = now
                    for stamp in frame["text"].split():
                        samples.append((int(stamp), now))
                    if stop_early and len(samples) == 1:
                        await ws.send(json.dumps({"type": "stop"}))
                elif kind == "turn_end":
                    self.state = frame["battle"]["state"]
                    self.done = True
                    return
                elif kind == "error":
                    raise RuntimeError(frame["message"])


async def warm_up(url: str, key: str) -> None:
    """One battle, stopped at its first token: imports, connections and caches are warm."""
    await Battle(key).run(url, asyncio.Semaphore(1), stop_early=True)


async def run_battles(
    url: str, keys: list[str], server_pid: int, ramp_concurrency: int
) -> dict[str, float]:
    battles = [Battle(key) for key in keys]
    gate = asyncio.Semaphore(ramp_concurrency)
    begin = time.monotonic_ns()
    tasks = [asyncio.create_task(b.run(url, gate)) for b in battles]
    peak = 0
    while not all(t.done() for t in tasks):
        peak = max(peak, tree_rss_kib(server_pid))
        await asyncio.sleep(0.1)
    failures = [t.exception() for t in tasks if t.exception() is not None]
    if failures:
        raise RuntimeError(f"{len(failures)} battles failed: {failures[0]!r}")
    # Steady state: from the moment the last battle's first token arrived to the moment the
    # first battle's last token arrived, every battle is streaming; only tokens emitted in
    # that window count for p50/p99.
    all_streaming = max(b.first_delta_ns for b in battles)
    first_end = min(b.last_delta_ns for b in battles)
    steady = [
        (r - e) / 1e6 for b in battles for e, r in b.samples if all_streaming <= e <= first_end
    ]
    every = [(r - e) / 1e6 for b in battles for e, r in b.samples]
    window_s = max(0.0, (first_end - all_streaming) / 1e9)
    return {
        "battles": len(battles),
        "ready": sum(b.state == "ready" for b in battles),
        "tokens": len(every),
        "steady_tokens": len(steady),
        "window_s": window_s,
        "steady_rate": len(steady) / window_s if window_s else float("nan"),
        "ramp_s": (all_streaming - begin) / 1e9,
        "p50": percentile(steady, 50),
        "p99": percentile(steady, 99),
        "max": max(steady) if steady else float("nan"),
        "p50_all": percentile(every, 50),
        "p99_all": percentile(every, 99),
        "peak_kib": peak,
    }


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def _run(coro):  # noqa: ANN001, ANN202
    """Run the clients on uvloop, as the server does, so the client side costs less CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--battles", default="100,500", help="comma-separated battle counts")
    parser.add_argument("--rate", type=float, default=10.0, help="tokens per second per answer")
    parser.add_argument(
        "--seconds", type=float, default=40.0, help="length of an answer (tokens = rate x this)"
    )
    parser.add_argument("--tokens", type=int, default=0, help="tokens per answer (overrides)")
    parser.add_argument(
        "--ramp-concurrency", type=int, default=25, help="battles being opened at once"
    )
    parser.add_argument(
        "--ws-deflate",
        choices=("on", "off"),
        default="on",
        help="permessage-deflate on the server's websockets (on: as docker-compose runs it)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="uvicorn worker processes (sockets are per process: no shared state needed)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", ""),
        help="default: $DATABASE_URL, else SQLite in a temporary directory",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.battles.split(",") if n.strip()]
    tokens = args.tokens or max(10, round(args.rate * args.seconds))
    workdir = Path(tempfile.mkdtemp(prefix="arena-bench-"))
    database_url = args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}"
    postgres = database_url.startswith(("postgres", "pgsql"))
    redis = redis_url()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "0",
        "DATABASE_URL": database_url,
        # Persistent connections, one per database worker thread, as a deployment would use.
        "DATABASE_CONN_MAX_AGE": os.environ.get("DATABASE_CONN_MAX_AGE", "60"),
        "REDIS_URL": redis,
        "DJANGO_LOG_LEVEL": "WARNING",
        "ARENA_LIVE_MAX_CONCURRENT_BATTLES": "1000000",
        "ARENA_LIVE_MAX_OUTPUT_TOKENS": str(tokens + 10),
        "ARENA_LIVE_ANSWER_SECONDS": str(tokens / args.rate * 10 + 120),
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[subprocess.Popen] = []

    def manage(*argv: str) -> str:
        result = subprocess.run(
            [PYTHON, "manage.py", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"manage.py {argv[0]} failed:\n{result.stderr[-2000:]}")
        return result.stdout

    try:
        upstream = subprocess.Popen(
            [
                PYTHON,
                "-c",
                UPSTREAM.format(root=str(ROOT), tokens=tokens, delay=1.0 / args.rate),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(upstream)
        assert upstream.stdout is not None
        upstream_url = f"http://127.0.0.1:{int(upstream.stdout.readline())}/v1"
        manage("migrate", "--noinput")
        for side in ("a", "b"):
            manage(
                "add_model",
                f"--slug=bench-{side}",
                f"--provider-url={upstream_url}",
                f"--upstream-model=bench-{side}",
            )
        total = 2 * args.workers + sum(counts)
        out = manage("shell", "-c", SESSIONS.replace("TOTAL", str(total)))
        keys = next(line for line in out.splitlines() if line.startswith("KEYS ")).split()[1:]
        port = free_port()
        server = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "uvicorn",
                "config.asgi:application",
                "--host=127.0.0.1",
                f"--port={port}",
                "--ws=websockets-sansio",
                "--loop=uvloop",
                "--http=httptools",
                "--log-level=warning",
                "--no-access-log",
                "--backlog=4096",
                "--lifespan=off",
                f"--ws-per-message-deflate={args.ws_deflate == 'on'}",
                f"--workers={args.workers}",
            ],
            cwd=ROOT,
            env=env,
        )
        procs.append(server)
        wait_port(port, server)
        url = f"ws://127.0.0.1:{port}/ws/battle"

        print(
            f"streaming benchmark: fixed rate {args.rate:g} tokens/s per answer, {tokens} tokens "
            f"per answer ({tokens / args.rate:g} s), two answers per battle, so N battles relay "
            f"{2 * args.rate:g} x N tokens/s; {os.cpu_count()} CPUs; database "
            f"{'PostgreSQL' if postgres else 'SQLite (temporary file)'}; channel layer "
            f"{'Redis' if redis else 'in-memory'} (tokens go direct); battles opened "
            f"{args.ramp_concurrency} at a time; uvicorn x {args.workers} worker(s) (uvloop, "
            f"httptools, websockets-sansio, permessage-deflate {args.ws_deflate})"
        )
        print(
            "method: every token's text is the CLOCK_MONOTONIC ns of its emission at the "
            "upstream; the client takes CLOCK_MONOTONIC on receipt (one machine, one clock, no "
            "skew); overhead = receipt - emission"
        )
        # Each worker process takes its share of connections: warm a few, so every worker
        # has imported the consumer's code and opened its database connections.
        warm = 2 * args.workers
        for key in keys[:warm]:
            _run(warm_up(url, key))
        base_kib = tree_rss_kib(server.pid)
        print(f"server RSS after warm-up: {base_kib / 1024:.1f} MiB\n")
        header = (
            f"{'battles':>8} {'ready':>6} {'ramp s':>7} {'steady s':>9} {'tokens':>8} "
            f"{'tok/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 all':>8} "
            f"{'KiB/battle':>11} {'p99/target':>11}"
        )
        print(header)
        used = warm
        for count in counts:
            result = _run(
                run_battles(url, keys[used : used + count], server.pid, args.ramp_concurrency)
            )
            used += count
            per_battle = (result["peak_kib"] - base_kib) / count
            print(
                f"{count:>8} {result['ready']:>6} {result['ramp_s']:>7.1f} "
                f"{result['window_s']:>9.1f} {result['steady_tokens']:>8} "
                f"{result['steady_rate']:>7.0f} {result['p50']:>8.2f} {result['p99']:>8.2f} "
                f"{result['max']:>8.1f} {result['p99_all']:>8.1f} {per_battle:>11.1f} "
                f"{result['p99'] / TARGET_P99_MS:>10.2f}x",
                flush=True,
            )
            time.sleep(2.0)
            base_kib = tree_rss_kib(server.pid)
        print(
            f"\np50/p99/max: relay overhead per token (upstream emit -> websocket receive) over "
            f"the tokens emitted while all N battles stream ('steady s' long, 'tokens' of them, "
            f"'tok/s' relayed); 'p99 all' includes the ramp. KiB/battle = (peak server RSS - "
            f"RSS before the run) / N. Target p99 < {TARGET_P99_MS:g} ms at 500 battles on 2 "
            f"cores (p99/target < 1.00x meets it)."
        )
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT if proc is not procs[0] else signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
