"""Benchmark of live-battle streaming: relay overhead per token and memory per battle.

    .venv/bin/python bench/streaming.py [--battles 100,500] [--rate 2,4,10] [--seconds 30]
        [--repeat 1] [--ramp-concurrency 25] [--ws-deflate on|off] [--workers 2] [--database-url URL]

Every battle count runs at every rate. Three kinds of process on loopback, started and stopped
by this script:

1. the fake OpenAI-compatible upstream (``arena/tests/fake_openai.py``, one per rate), every
   token of which is the CLOCK_MONOTONIC time of its emission, at a fixed rate in tokens per
   second per answer (one token per SSE chunk);
2. the arena's ASGI app under uvicorn (``--workers`` processes, default two, one per core;
   uvloop, httptools, websockets-sansio, permessage-deflate off, as docker-compose runs it),
   with DEBUG off, the database of ``--database-url`` (default ``$DATABASE_URL``, else SQLite
   in a temporary directory), and the Redis channel layer when Redis answers at ``$REDIS_URL``
   (tokens never pass through the layer anyway);
3. this script (on uvloop), which opens N websocket clients, each with its own session,
   ``--ramp-concurrency`` at a time, starts a live battle on each and reads every frame.

Relay overhead of a token = its arrival at the client minus its emission at the upstream, over
tokens emitted while all N battles were streaming (the ramp excluded; "p99 all" includes it).
CLOCK_MONOTONIC is system-wide on Linux, so the processes share it: no clock skew. CPU per
relayed token, per process group, is read from /proc over the same steady state. Memory per
battle = (peak RSS of the server's process tree during the run - that before) / N.

Target (on 2 cores): p99 overhead under 20 ms at 500 concurrent battles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from array import array
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


def tree_pids(pid: int) -> list[int]:
    """A process and its descendants (uvicorn's workers under ``--workers``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/task/{current}/children") as handle:
                todo.extend(int(child) for child in handle.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
        found.append(current)
    return found


def tree_rss_kib(pid: int) -> int:
    total = 0
    for current in tree_pids(pid):
        try:
            total += rss_kib(current)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (its threads included) so far."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


class CpuMeter:
    """CPU used by the server (all its processes), the upstream and this process, and by the
    whole machine, between two snapshots."""

    def __init__(self, server_pid: int, upstream_pid: int) -> None:
        self.server_pid, self.upstream_pid = server_pid, upstream_pid

    def snapshot(self) -> tuple[float, ...]:
        server = sum(cpu_seconds(p) for p in tree_pids(self.server_pid))
        times = os.times()
        busy, total = machine_busy()
        return (
            server,
            cpu_seconds(self.upstream_pid),
            times.user + times.system,
            busy / CLOCK_TICKS,
            total / CLOCK_TICKS,
        )


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
        # Emitted and received ns, in arrays rather than a list of tuples: hundreds of
        # thousands of tuples would make this process's garbage collector walk them all, and
        # its pauses would be counted as relay overhead.
        self.emitted = array("q")
        self.received = array("q")
        self.first_delta_ns = 0
        self.last_delta_ns = 0
        self.done = False
        self.state = ""

    async def run(self, url: str, gate: asyncio.Semaphore, stop_early: bool = False) -> None:
        import websockets

        # The page's own origin, port included (arena.origin compares scheme, host and port).
        origin = "http://" + url.removeprefix("ws://").split("/", 1)[0]
        headers = {"Cookie": f"sessionid={self.key}", "Origin": origin}
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
        emitted, received = self.emitted, self.received
        async with ws:
            async for raw in ws:
                now = time.monotonic_ns()
                frame = json.loads(raw)
                kind = frame["type"]
                if kind == "deltas":
                    if not self.first_delta_ns:
                        self.first_delta_ns = now
                    self.last_delta_ns = now
                    for side in ("a", "b"):
                        for stamp in frame.get(side, "").split():
                            emitted.append(int(stamp))
                            received.append(now)
                    if stop_early and self.first_delta_ns == now:  # the first answer text
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
    url: str, keys: list[str], meter: CpuMeter, ramp_concurrency: int
) -> dict[str, float]:
    battles = [Battle(key) for key in keys]
    gate = asyncio.Semaphore(ramp_concurrency)
    begin = time.monotonic_ns()
    tasks = [asyncio.create_task(b.run(url, gate)) for b in battles]
    peak = 0
    # CPU over the steady state as this loop sees it (every battle streaming, none finished);
    # the tokens received in that window are counted afterwards.
    cpu_from: tuple[float, ...] = ()
    cpu_to: tuple[float, ...] = ()
    window_ns = [0, 0]
    while not all(t.done() for t in tasks):
        peak = max(peak, tree_rss_kib(meter.server_pid))
        if not cpu_from and all(b.first_delta_ns for b in battles):
            cpu_from, window_ns[0] = meter.snapshot(), time.monotonic_ns()
        if cpu_from and not cpu_to and any(b.done for b in battles):
            cpu_to, window_ns[1] = meter.snapshot(), time.monotonic_ns()
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
        (r - e) / 1e6
        for b in battles
        for e, r in zip(b.emitted, b.received, strict=True)
        if all_streaming <= e <= first_end
    ]
    every = [(r - e) / 1e6 for b in battles for e, r in zip(b.emitted, b.received, strict=True)]
    window_s = max(0.0, (first_end - all_streaming) / 1e9)
    cpu = {"server_us": math.nan, "upstream_us": math.nan, "clients_us": math.nan}
    cpu["machine_pct"] = math.nan
    if cpu_from and cpu_to:
        relayed = sum(1 for b in battles for r in b.received if window_ns[0] <= r <= window_ns[1])
        used = [b - a for a, b in zip(cpu_from, cpu_to, strict=True)]
        if relayed:
            for name, seconds in zip(
                ("server_us", "upstream_us", "clients_us"), used, strict=False
            ):
                cpu[name] = seconds / relayed * 1e6
        cpu["machine_pct"] = (
            100 * (os.cpu_count() or 1) * used[3] / used[4] if used[4] else math.nan
        )
    return {
        **cpu,
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


def start_upstream(rate: float, tokens: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [PYTHON, "-c", UPSTREAM.format(root=str(ROOT), tokens=tokens, delay=1.0 / rate)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}/v1"


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--battles", default="100,500", help="comma-separated battle counts")
    parser.add_argument(
        "--rate",
        default="2,4,10",
        help="comma-separated tokens per second per answer; every count runs at every rate",
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="length of an answer")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every configuration")
    parser.add_argument(
        "--ramp-concurrency", type=int, default=25, help="battles being opened at once"
    )
    parser.add_argument(
        "--ws-deflate",
        choices=("on", "off"),
        default="off",
        help="permessage-deflate on the server's websockets (off: as docker-compose runs it)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="uvicorn worker processes, one per core (sockets are per process: no shared state)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", ""),
        help="default: $DATABASE_URL, else SQLite in a temporary directory",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.battles.split(",") if n.strip()]
    rates = [float(r) for r in args.rate.split(",") if r.strip()]
    max_tokens = max(max(10, round(rate * args.seconds)) for rate in rates)
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
        "ARENA_RATELIMIT_LIVE": "",  # every client is 127.0.0.1 here
        "ARENA_LIVE_MAX_OUTPUT_TOKENS": str(max_tokens + 10),
        "ARENA_LIVE_ANSWER_SECONDS": str(args.seconds * 10 + 120),
        "PYTHONUNBUFFERED": "1",
    }
    server: subprocess.Popen | None = None
    upstream: subprocess.Popen | None = None

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

    def register(upstream_url: str) -> None:
        for side in ("a", "b"):
            manage(
                "add_model",
                f"--slug=bench-{side}",
                f"--provider-url={upstream_url}",
                f"--upstream-model=bench-{side}",
                "--update",  # each rate's upstream replaces the previous one
            )

    def start_server() -> tuple[subprocess.Popen, str]:
        port = free_port()
        proc = subprocess.Popen(
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
        wait_port(port, proc)
        return proc, f"ws://127.0.0.1:{port}/ws/battle"

    try:
        manage("migrate", "--noinput")
        warm = 2 * args.workers
        total = args.repeat * len(rates) * (warm * len(counts) + sum(counts))
        out = manage("shell", "-c", SESSIONS.replace("TOTAL", str(total)))
        keys = next(line for line in out.splitlines() if line.startswith("KEYS ")).split()[1:]

        print(
            f"streaming benchmark: answers of {args.seconds:g} s at a fixed rate (one token per "
            f"SSE chunk), two answers per battle, so N battles at R tokens/s relay 2 x R x N "
            f"tokens/s; {os.cpu_count()} CPUs shared by the server, the upstream and the "
            f"clients; database {'PostgreSQL' if postgres else 'SQLite (temporary file)'}; "
            f"channel layer {'Redis' if redis else 'in-memory'} (tokens go direct); battles "
            f"opened {args.ramp_concurrency} at a time; uvicorn x {args.workers} worker(s) "
            f"(uvloop, httptools, websockets-sansio, permessage-deflate {args.ws_deflate}); "
            f"upstream calls through the openai client on its aiohttp transport"
        )
        print(
            "method: every token's text is the CLOCK_MONOTONIC ns of its emission at the "
            "upstream; the client takes CLOCK_MONOTONIC on receipt (one machine, one clock, no "
            "skew); overhead = receipt - emission\n"
        )
        header = (
            f"{'battles':>7} {'tok/s':>5} {'ready':>5} {'ramp s':>6} {'steady s':>8} "
            f"{'relayed/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'p99 all':>7} "
            f"{'server':>7} {'upstrm':>7} {'clients':>7} {'machine':>7} {'KiB/btl':>7} "
            f"{'p99/target':>10}"
        )
        print(header)
        used = 0
        for rate in rates:
            tokens = max(10, round(rate * args.seconds))
            upstream, upstream_url = start_upstream(rate, tokens)
            register(upstream_url)
            for count in [c for c in counts for _ in range(args.repeat)]:
                # A fresh server for every run: memory is measured from a cold process, and
                # nothing one run left behind weighs on the next.
                server, url = start_server()
                # Each worker process takes its share of connections: warm a few, so every
                # worker has imported the consumer's code and opened its database connections.
                for key in keys[used : used + warm]:
                    _run(warm_up(url, key))
                used += warm
                time.sleep(1.0)
                base_kib = tree_rss_kib(server.pid)
                meter = CpuMeter(server.pid, upstream.pid)
                r = _run(run_battles(url, keys[used : used + count], meter, args.ramp_concurrency))
                used += count
                stop(server, signal.SIGINT)
                server = None
                per_battle = (r["peak_kib"] - base_kib) / count
                print(
                    f"{count:>7} {rate:>5g} {r['ready']:>5} {r['ramp_s']:>6.1f} "
                    f"{r['window_s']:>8.1f} {r['steady_rate']:>9.0f} {r['p50']:>7.2f} "
                    f"{r['p99']:>7.2f} {r['max']:>7.1f} {r['p99_all']:>7.1f} "
                    f"{r['server_us']:>7.0f} {r['upstream_us']:>7.0f} {r['clients_us']:>7.0f} "
                    f"{r['machine_pct']:>6.0f}% {per_battle:>7.1f} "
                    f"{r['p99'] / TARGET_P99_MS:>9.2f}x",
                    flush=True,
                )
            stop(upstream)
            upstream = None
        print(
            f"\np50/p99/max: relay overhead per token (upstream emit -> websocket receive) over "
            f"the tokens emitted while all N battles stream ('steady s' long; 'relayed/s' "
            f"tokens a second); 'p99 all' includes the ramp (battles being opened). server, "
            f"upstrm, clients: CPU microseconds per relayed token over the steady state, of the "
            f"server's processes, the fake upstream and this script's clients; machine: CPU "
            f"busy over the steady state, of {100 * (os.cpu_count() or 1)}%. KiB/btl = (peak "
            f"server RSS - RSS before the run) / N. Target p99 < {TARGET_P99_MS:g} ms at 500 "
            f"battles on 2 cores (p99/target < 1.00x meets it)."
        )
    finally:
        if server is not None:
            stop(server, signal.SIGINT)
        if upstream is not None:
            stop(upstream)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
