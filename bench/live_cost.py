"""What one live battle costs the server: CPU, connections opened, collector time, loop stalls.

    .venv/bin/python bench/live_cost.py [--battles 200] [--concurrency 10] [--tokens 27]
        [--delay 0.02] [--stalls]

Load-independent where bench/streaming.py is not: on a shared machine its relay latencies move
with everyone else's load, while the CPU a battle costs the server and the connections it opens
do not (much). One uvicorn worker (uvloop, httptools, websockets-sansio, as in production) runs
in a wrapper process that counts, over the measured battles:

- the server's CPU time (``time.process_time``), divided by the battles;
- connections opened to Redis (``redis.connection.AbstractConnection.connect`` on a closed
  connection) and to PostgreSQL (``psycopg.connect``), per battle;
- garbage collections and their total time (``gc.callbacks``);
- event-loop stalls: a watchdog thread notes every time the loop's 1 ms heartbeat is more than
  15 ms late and, with ``--stalls``, which code each thread was running then.

A battle is the page's: a websocket with its own session, a ``start`` frame, two answers of
``--tokens`` chunks at ``--delay`` seconds from the loopback fake upstream
(``arena/tests/fake_openai.py``), the ``turn_end``, the socket closed; ``--concurrency`` at a
time. Five battles first warm the worker. Settings: ``config.settings.local`` with DEBUG off,
``$DATABASE_URL`` and ``$REDIS_URL`` (the cache; without it, local memory), and
``DATABASE_CONN_MAX_AGE`` as in the environment (default 0, production's without its pool).
Use a database of its own: the script migrates it and registers two live models, ``cost-a``
and ``cost-b``, which must be the only live ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
sys.path.insert(0, str(ROOT))

from bench.shape import free_port  # noqa: E402
from bench.streaming import SESSIONS, wait_port  # noqa: E402

SERVER = r"""
import asyncio, collections, gc, json, os, signal, sys, threading, time, traceback
sys.path.insert(0, os.getcwd())
counts = {"redis": 0, "pg": 0, "gc": 0, "gc_s": 0.0, "stalls": 0}
stacks = collections.Counter()

import redis.connection as rc
_connect = rc.AbstractConnection.connect
def connect(self, *args, **kwargs):
    if self._sock is None:
        counts["redis"] += 1
    return _connect(self, *args, **kwargs)
rc.AbstractConnection.connect = connect

import psycopg
_pg_connect = psycopg.connect
def pg_connect(*args, **kwargs):
    counts["pg"] += 1
    return _pg_connect(*args, **kwargs)
psycopg.connect = pg_connect

_gc_started = [0.0]
def gc_timed(phase, info):
    if phase == "start":
        _gc_started[0] = time.perf_counter()
    else:
        counts["gc"] += 1
        counts["gc_s"] += time.perf_counter() - _gc_started[0]
gc.callbacks.append(gc_timed)

beat = [time.monotonic()]
loop_thread = threading.get_ident()
def watchdog():
    noted = 0.0
    while True:
        time.sleep(0.002)
        if time.monotonic() - beat[0] > 0.015 and beat[0] != noted:
            noted = beat[0]
            counts["stalls"] += 1
            if not os.environ.get("COST_STALLS"):
                continue
            for ident, frame in sys._current_frames().items():
                if ident == threading.get_ident():
                    continue
                where = " < ".join(
                    f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})"
                    for f in traceback.extract_stack(frame)[-4:][::-1]
                )
                stacks[("loop: " if ident == loop_thread else "thread: ") + where] += 1

async def heartbeat():
    while True:
        beat[0] = time.monotonic()
        await asyncio.sleep(0.001)

def report(*_):
    out = {**counts, "cpu_s": time.process_time(), "stacks": stacks.most_common(20)}
    with open(os.environ["COST_REPORT"], "w") as fh:
        json.dump(out, fh)
signal.signal(signal.SIGUSR1, report)

import uvicorn, uvicorn.server
_startup = uvicorn.server.Server.startup
async def startup(self, *args, **kwargs):
    asyncio.get_running_loop().create_task(heartbeat())
    threading.Thread(target=watchdog, daemon=True).start()
    return await _startup(self, *args, **kwargs)
uvicorn.server.Server.startup = startup
uvicorn.run(
    "config.asgi:application", host="127.0.0.1", port=int(os.environ["COST_PORT"]),
    ws="websockets-sansio", loop="uvloop", http="httptools", log_level="warning",
    access_log=False, lifespan="off", ws_per_message_deflate=False,
)
"""

UPSTREAM = r"""
import asyncio, sys
sys.path.insert(0, {root!r})
from arena.tests.fake_openai import FakeModel, FakeUpstream
import uvloop
uvloop.install()

async def main():
    tokens = [f"word{{i}} " for i in range({tokens})]
    upstream = FakeUpstream(default=FakeModel(tokens=tokens, delay={delay}), record=False)
    await upstream.serve()
    print(upstream.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--battles", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=27, help="chunks per answer")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument("--stalls", action="store_true", help="print where the stalls were")
    args = parser.parse_args()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "0",
        "DATABASE_CONN_MAX_AGE": os.environ.get("DATABASE_CONN_MAX_AGE", "0"),
        "ARENA_LIVE_MAX_CONCURRENT_BATTLES": "1000000",
        "ARENA_RATELIMIT_LIVE": "",  # every client is 127.0.0.1 here
        "PYTHONUNBUFFERED": "1",
    }
    if args.stalls:
        env["COST_STALLS"] = "1"

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
            raise SystemExit(f"manage.py {argv[0]} failed:\n{result.stderr[-2000:]}")
        return result.stdout

    code = UPSTREAM.format(root=str(ROOT), tokens=args.tokens, delay=args.delay)
    upstream = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, text=True)
    server: subprocess.Popen[bytes] | None = None
    try:
        assert upstream.stdout is not None
        upstream_port = int(upstream.stdout.readline())
        manage("migrate", "--noinput")
        for side in ("a", "b"):
            manage(
                "add_model",
                f"--slug=cost-{side}",
                f"--provider-url=http://127.0.0.1:{upstream_port}/v1",
                f"--upstream-model=cost-{side}",
                "--update",
            )
        out = manage("shell", "-c", SESSIONS.replace("TOTAL", str(args.battles + 5)))
        keys = next(line for line in out.splitlines() if line.startswith("KEYS ")).split()[1:]
        port = free_port()
        report = Path(tempfile.mkdtemp(prefix="arena-cost-")) / "report.json"
        server = subprocess.Popen(
            [PYTHON, "-c", SERVER],
            cwd=ROOT,
            env={**env, "COST_PORT": str(port), "COST_REPORT": str(report)},
        )
        wait_port(port, server)

        def snapshot() -> dict:
            assert server is not None
            report.unlink(missing_ok=True)
            server.send_signal(signal.SIGUSR1)
            for _ in range(100):
                time.sleep(0.05)
                if report.exists() and report.stat().st_size:
                    return json.loads(report.read_text())
            raise SystemExit("the server did not report")

        result = asyncio.run(_measure(port, keys, args, snapshot))
    finally:
        for proc in (server, upstream):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
    print(json.dumps(result["figures"]))
    for count, where in result["stacks"]:
        print(f"{count:5d}  {where}")
    return 0


async def _battle(port: int, key: str) -> int:
    import websockets

    ws = await websockets.connect(
        f"ws://127.0.0.1:{port}/ws/battle",
        additional_headers={"Cookie": f"sessionid={key}", "Origin": f"http://127.0.0.1:{port}"},
        ping_interval=None,
    )
    await ws.send(json.dumps({"type": "start", "prompt": "Say something about the sea"}))
    deltas = 0
    while True:
        frame = json.loads(await ws.recv())
        if frame["type"] == "error":
            raise SystemExit(f"error frame: {frame}")
        deltas += frame["type"] == "deltas"
        if frame["type"] == "turn_end":
            break
    await ws.close()
    return deltas


async def _measure(port: int, keys: list[str], args: argparse.Namespace, snapshot) -> dict:
    for key in keys[:5]:  # warm: the worker's clients, threads and connections
        await _battle(port, key)
    before = snapshot()
    started = time.monotonic()
    gate = asyncio.Semaphore(args.concurrency)

    async def one(key: str) -> int:
        async with gate:
            return await _battle(port, key)

    deltas = await asyncio.gather(*(one(key) for key in keys[5 : 5 + args.battles]))
    wall = time.monotonic() - started
    after = snapshot()
    n = args.battles
    return {
        "figures": {
            "battles": n,
            "deltas_frames_per_battle": sum(deltas) / n,
            "server_cpu_ms_per_battle": round((after["cpu_s"] - before["cpu_s"]) * 1000 / n, 2),
            "redis_connects_per_battle": round((after["redis"] - before["redis"]) / n, 3),
            "postgres_connects_per_battle": round((after["pg"] - before["pg"]) / n, 3),
            "gc_collections": after["gc"] - before["gc"],
            "gc_ms": round((after["gc_s"] - before["gc_s"]) * 1000, 1),
            "loop_stalls_over_15ms": after["stalls"] - before["stalls"],
            "wall_s": round(wall, 1),
        },
        "stacks": after["stacks"],
    }


if __name__ == "__main__":
    sys.exit(main())
