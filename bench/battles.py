"""Closed-loop benchmark of whole live battles against the production shape (not a timed test).

    .venv/bin/python bench/battles.py [--levels 1,10,50,100,200] [--seconds 20] [--warmup 3]
        [--tokens 26] [--delay 0.02] [--quick] [--profile DIR] [--json FILE] [--env NAME=VALUE]
        [--vote-over ws|http] [--baseline REV [--baseline-vote-over ws|http]]

1. A fake OpenAI-compatible upstream on loopback (``arena/tests/fake_openai.py``, its own
   process): ``--tokens`` content chunks ``--delay`` seconds apart per answer. The direct stream
   time (one streamed request to it, read to the end, no arena in between) is measured in the
   same run, idle, as the anchor of the overhead.
2. The production shape (bench/shape.py): ``config.settings.production``, ``migrate``,
   ``collectstatic``, ``load_demo``, ``rate_snapshot``, two live models registered with
   ``manage.py add_model`` pointing at the fake, then for every level a fresh ``bin/serve``
   (uvicorn, two workers) and a fresh Celery worker on one PostgreSQL database and one Redis db,
   warmed up by 8 visitors with a new connection per request and a new socket per battle (so
   both workers have imported what a page, a battle and a vote need before the window).
3. Per level, N visitors (asyncio + aiohttp on uvloop, one cookie jar each, a browser
   user-agent) do what the page does: load ``/?mode=live`` (session and CSRF cookies), accept
   the terms (``POST /api/terms`` with ``X-CSRFToken``), solve the proof-of-work challenge
   (``GET /api/challenge``, ``POST /api/challenge/verify``, as static/js/challenge.js does before
   a session's first vote) and open ``/ws/battle`` with their cookies; none of that is timed.
   Then each repeats, with no think time: a ``start`` frame with a new prompt -> every frame up
   to ``turn_end`` (the battle saved and votable) -> the vote -> the next battle, on the same
   socket (static/js/live.js keeps it open across battles). The vote goes as the page sends it,
   ``--vote-over ws`` (the default): a ``vote`` frame on the socket answered by ``voted``;
   ``--vote-over http``: ``POST /api/battles/<id>/vote``, as the page did before the socket
   carried votes. A ``--baseline`` tree votes over HTTP (a tree from before the ``vote`` frame
   has none) unless ``--baseline-vote-over ws`` says it has one.
4. After ``--warmup`` seconds the measured window of ``--seconds`` starts: battles/s counts the
   battles whose vote was acknowledged (``voted``, or 201) inside it; latencies are those
   battles'. TTFT = ``start`` sent -> first ``deltas``; battle time = ``start`` sent ->
   ``turn_end``; overhead = battle time - the direct stream time; vote = the vote's round trip
   (frame -> ``voted``, or the HTTP request).
5. CPU over the window from /proc (user + system): the uvicorn processes, the Celery worker,
   this client process, and PostgreSQL and Redis whole (those servers are shared with anything
   else on the machine: an upper bound). RSS of each uvicorn worker (VmRSS) at the level's end.
   Acknowledged votes versus rows in ``arena_vote`` for those battles, over the whole level.

Settings changed from production for the run (printed): the per-address limits (every visitor
here is 127.0.0.1, so ``ARENA_RATELIMIT_ENABLE=false`` and ``ARENA_WS_MAX_PER_ADDRESS=0``), the minimum seconds before a vote (a
closed loop votes the moment ``turn_end`` arrives; ``ARENA_MIN_VOTE_SECONDS=0``) and the daily
vote caps (``ARENA_VOTES_PER_SESSION_PER_DAY``/``_PER_IP_PER_DAY`` very high). The challenge,
the per-session concurrency limit, sessions and CSRF are production's.

``--profile DIR`` records both uvicorn workers with py-spy (``--format raw``, collapsed stacks)
over each level's measured window and prints the shares of the samples by phase (exclusive),
by cost centre, by package, and the heaviest frames. ``--count-queries LOG`` sets
``log_statement = 'all'`` on the bench database and counts its statements per battle in the
PostgreSQL server's log; PostgreSQL's connections opened per battle are always printed.

The client shares the 2 cores with the server: the server CPU per battle depends far less on
the machine's load than battles/s does, and 2 cores / that CPU bounds the battles/s two workers
could reach.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shape import (  # noqa: E402
    BIN,
    USER_AGENT,
    Database,
    Shape,
    Tree,
    add_tree_arguments,
    close_trees,
    free_port,
    open_trees,
    stored_votes,
)

FASTCHAT_PEAK = 7.0  # battles/s, FastChat 0.2.36 on this machine: the throughput pass's figure
BEFORE = {
    1: 1.7,
    10: 15.2,
    50: 21.7,
    100: 19.0,
    200: 16.2,
}  # the throughput pass's "before" battles/s
TARGET_BATTLES_PER_S = 70.0
TARGET_CPU_MS = 10.0
TARGET_OVERHEAD_P99_MS = 50.0  # at 10 visitors
TARGET_RSS_MB = 250.0
BENCH_ENV = {
    "ARENA_RATELIMIT_ENABLE": "false",
    "ARENA_MIN_VOTE_SECONDS": "0",
    "ARENA_VOTES_PER_SESSION_PER_DAY": "100000000",
    "ARENA_VOTES_PER_IP_PER_DAY": "100000000",
    # Every visitor is 127.0.0.1: with the per-address socket cap (32) a level above it would
    # run 32 visitors, the rest refused.
    "ARENA_WS_MAX_PER_ADDRESS": "0",
}
LIVE_MODELS = ("bench-live-a", "bench-live-b")
WINNERS = ("model_a", "model_b", "tie", "model_a")

UPSTREAM = r"""
import asyncio, sys
sys.path.insert(0, {root!r})
from arena.tests.fake_openai import FakeModel, FakeUpstream
import uvloop

async def main():
    upstream = FakeUpstream(
        host={host!r}, default=FakeModel(tokens={tokens}, delay={delay}), record=False
    )
    await upstream.serve()
    print(upstream.port, flush=True)
    await asyncio.Event().wait()

uvloop.run(main())
"""


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile by linear interpolation between closest ranks (numpy's default);
    NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def solve_challenge(challenge: dict[str, object]) -> str:
    """ALTCHA's payload for a challenge: the number n with hex(SHA-256(salt + n)) == challenge,
    as static/js/challenge.js finds it (here with hashlib)."""
    salt, target = str(challenge["salt"]), str(challenge["challenge"])
    for number in range(int(challenge["maxnumber"]) + 1):  # type: ignore[call-overload]
        if hashlib.sha256(f"{salt}{number}".encode()).hexdigest() == target:
            fields = {
                "algorithm": challenge["algorithm"],
                "challenge": target,
                "number": number,
                "salt": salt,
                "signature": challenge["signature"],
            }
            return base64.b64encode(json.dumps(fields).encode()).decode()
    raise RuntimeError("no number solves the challenge")


# --- /proc ------------------------------------------------------------------------------------
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def server_cpu_seconds(comm: str) -> float:
    """CPU of every process named ``comm`` (PostgreSQL's postmaster and backends, Redis), plus
    what their exited children used (a backend of a closed connection is reaped by the
    postmaster, whose cutime/cstime then hold it): consistent between two snapshots."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as handle:
                if not handle.read().startswith(comm):
                    continue
            fields = _stat(entry)
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / TICK
    # A backend's cutime is 0, and the postmaster's utime+stime+cutime+cstime counts each reaped
    # backend once.
    return total


@dataclass
class Cpu:
    web: float
    worker: float
    postgres: float
    redis: float
    client: float

    @classmethod
    def now(cls, shape: Shape) -> Cpu:
        groups = shape.cpu_seconds()
        mine = os.times()
        return cls(
            web=groups.get("uvicorn", 0.0),
            worker=groups.get("celery-worker", 0.0),
            postgres=server_cpu_seconds("postgres"),
            redis=server_cpu_seconds("redis-server"),
            client=mine.user + mine.system,
        )

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(
            *(getattr(self, n) - getattr(other, n) for n in self.__dataclass_fields__)  # noqa: B009
        )


# --- the visitors -----------------------------------------------------------------------------
@dataclass
class Done:
    """One battle whose vote was acknowledged."""

    battle_id: str
    finished: float  # monotonic, when the vote's reply arrived
    ttft_ms: float
    battle_ms: float
    vote_ms: float


@dataclass
class Level:
    visitors: int
    force_close: bool = False  # a new connection per HTTP request (the warm-up's)
    vote_over: str = "ws"  # "ws": a vote frame on the battle socket; "http": POST .../vote
    measure_from: float = math.inf
    stop_at: float = math.inf
    ready: int = 0
    go: asyncio.Event = field(default_factory=asyncio.Event)
    done: list[Done] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    def window(self) -> list[Done]:
        return [d for d in self.done if self.measure_from <= d.finished <= self.stop_at]


async def _json(response: object) -> object:
    import aiohttp

    assert isinstance(response, aiohttp.ClientResponse)
    return json.loads(await response.read())


async def _sign_up(http: object, base: str) -> tuple[dict[str, str], object]:
    """The page, the terms and the challenge, as a first visit does; then the socket."""
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    async with http.get("/?mode=live") as response:
        page = await response.text()
        if response.status != 200:
            raise RuntimeError(f"page {response.status}")
    csrf = next((c.value for c in http.cookie_jar if c.key == "csrftoken"), "")
    headers = {"X-CSRFToken": csrf, "Content-Type": "application/json"}
    async with http.post("/api/terms", data='{"accept": true}', headers=headers) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"terms {response.status}")
    if 'data-challenge="true"' in page:  # battle.js solves it only then
        async with http.get("/api/challenge", headers=headers) as response:
            challenge = await _json(response)
            if response.status != 200 or not isinstance(challenge, dict):
                raise RuntimeError(f"challenge {response.status}")
        payload = await asyncio.get_running_loop().run_in_executor(None, solve_challenge, challenge)
        async with http.post(
            "/api/challenge/verify", data=json.dumps({"payload": payload}), headers=headers
        ) as verified:
            await verified.read()
            if verified.status != 200:
                raise RuntimeError(f"challenge verify {verified.status}")
    return headers, await _open_socket(http, base)


async def _open_socket(http: object, base: str) -> object:
    """The battle page's websocket, with the session's cookies and the page's origin."""
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    return await http.ws_connect(
        base.replace("http", "ws", 1) + "/ws/battle",
        headers={"Origin": base},
        autoping=True,
        heartbeat=None,
        max_msg_size=0,
    )


async def _battle(socket: object, prompt: str, level: Level) -> tuple[str, float, float] | None:
    """One live battle on the socket: (battle id, TTFT ms, battle ms), or None if it failed."""
    import aiohttp

    assert isinstance(socket, aiohttp.ClientWebSocketResponse)
    t0 = time.perf_counter()
    await socket.send_str(json.dumps({"type": "start", "prompt": prompt, "mode": "anonymous"}))
    first = 0.0
    while True:
        message = await socket.receive(timeout=120)
        if message.type != aiohttp.WSMsgType.TEXT:
            raise RuntimeError(f"socket {message.type.name}")
        frame = json.loads(message.data)
        kind = frame["type"]
        if kind in ("deltas", "delta"):  # "delta": a --baseline tree's one-piece frame
            if not first:
                first = time.perf_counter()
        elif kind == "turn_end":
            battle = frame["battle"]
            if battle["state"] != "ready":
                level.errors[f"battle {battle['state']}"] += 1
                return None
            end = time.perf_counter()
            return str(battle["id"]), (first - t0) * 1000, (end - t0) * 1000
        elif kind == "error":
            level.errors[f"frame {frame.get('code')}"] += 1
            return None


async def _vote_frame(socket: object, battle_id: str, winner: str) -> str:
    """The vote as the page sends it on an open socket: "" once ``voted`` comes back, else the
    refusal's code."""
    import aiohttp

    assert isinstance(socket, aiohttp.ClientWebSocketResponse)
    frame = {"type": "vote", "battle_id": battle_id, "winner": winner}
    await socket.send_str(json.dumps(frame))
    while True:
        message = await socket.receive(timeout=120)
        if message.type != aiohttp.WSMsgType.TEXT:
            raise RuntimeError(f"socket {message.type.name}")
        answer = json.loads(message.data)
        if answer["type"] == "voted" and answer["battle"]["id"] == battle_id:
            return ""
        if answer["type"] == "error":
            return str(answer.get("code"))


async def _vote_http(http: object, headers: dict[str, str], battle_id: str, winner: str) -> str:
    """The vote over HTTP, as the page sends it with the socket closed: "" on a 201, else the
    status."""
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    async with http.post(
        f"/api/battles/{battle_id}/vote", data=json.dumps({"winner": winner}), headers=headers
    ) as response:
        await response.read()
        return "" if response.status == 201 else str(response.status)


async def visitor(base: str, level: Level, index: int) -> None:
    import aiohttp

    jar = aiohttp.CookieJar(unsafe=True)  # cookies of 127.0.0.1 (an address) kept
    async with aiohttp.ClientSession(
        base_url=base,
        cookie_jar=jar,
        timeout=aiohttp.ClientTimeout(total=120),
        headers={"User-Agent": USER_AGENT},
        # Idle connections closed before uvicorn's keep-alive timeout (5 s) does it, so that a
        # vote is never sent on a connection the server is closing at that moment.
        connector=aiohttp.TCPConnector(limit=0, force_close=True)
        if level.force_close
        else aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0),
    ) as http:
        try:
            headers, socket = await _sign_up(http, base)
        except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
            level.errors[f"sign-up {exc}"[:80]] += 1
            level.ready += 1
            return
        level.ready += 1
        await level.go.wait()
        n = 0
        try:
            while time.monotonic() < level.stop_at:
                n += 1
                if level.force_close and n > 1:  # the warm-up: a new socket per battle too
                    await socket.close()  # type: ignore[attr-defined]
                    socket = await _open_socket(http, base)
                prompt = f"Visitor {index}, battle {n}: count to ten in words, please."
                try:
                    outcome = await _battle(socket, prompt, level)
                except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
                    level.errors[f"battle {type(exc).__name__}"] += 1
                    return  # the socket is gone: this visitor leaves
                if outcome is None:
                    await asyncio.sleep(0.05)
                    continue
                battle_id, ttft_ms, battle_ms = outcome
                t2 = time.perf_counter()
                try:
                    if level.vote_over == "ws":
                        refused = await _vote_frame(socket, battle_id, WINNERS[n % 4])
                    else:
                        refused = await _vote_http(http, headers, battle_id, WINNERS[n % 4])
                except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
                    level.errors[f"vote {type(exc).__name__}"] += 1
                    continue
                vote_ms = (time.perf_counter() - t2) * 1000
                if refused:
                    level.errors[f"vote {refused}"] += 1
                    continue
                level.done.append(Done(battle_id, time.monotonic(), ttft_ms, battle_ms, vote_ms))
        finally:
            await socket.close()  # type: ignore[attr-defined]


async def run_level(
    base: str,
    visitors: int,
    warmup: float,
    seconds: float,
    shape: Shape,
    on_window: Callable[[bool], object] | None = None,
    force_close: bool = False,
    vote_over: str = "ws",
) -> tuple[Level, Cpu]:
    """Sign every visitor up (not timed), run them all, and measure the window (calling
    ``on_window(True)`` as it opens and ``on_window(False)`` as it closes)."""
    level = Level(visitors, force_close, vote_over=vote_over)
    tasks = [asyncio.create_task(visitor(base, level, i)) for i in range(visitors)]
    deadline = time.monotonic() + 180
    while level.ready < visitors and time.monotonic() < deadline:
        failed = next((t for t in tasks if t.done() and t.exception() is not None), None)
        if failed is not None:
            raise RuntimeError("a visitor failed") from failed.exception()
        await asyncio.sleep(0.05)
    start = time.monotonic()
    level.measure_from = start + warmup
    level.stop_at = level.measure_from + seconds
    level.go.set()
    await asyncio.sleep(max(0.0, level.measure_from - time.monotonic()))
    before = Cpu.now(shape)
    if on_window is not None:
        on_window(True)
    await asyncio.sleep(max(0.0, level.stop_at - time.monotonic()))
    used = Cpu.now(shape) - before
    if on_window is not None:
        on_window(False)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=180)
    return level, used


async def direct_stream_ms(upstream_url: str, runs: int = 7) -> float:
    """Median time of one streamed chat completion read to its end, straight from the fake."""
    import aiohttp

    body = json.dumps(
        {
            "model": "direct",
            "stream": True,
            "messages": [{"role": "user", "content": "count to ten"}],
            "stream_options": {"include_usage": True},
        }
    )
    times = []
    async with aiohttp.ClientSession() as http:
        for _ in range(runs):
            t0 = time.perf_counter()
            async with http.post(
                upstream_url + "/chat/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as response:
                async for _line in response.content:
                    pass
            times.append((time.perf_counter() - t0) * 1000)
    return percentile(times, 50)


# --- the server ---------------------------------------------------------------------------------
def fresh_server(shape: Shape) -> None:
    """Stop the web server and worker (if started) and start new ones on a new port."""
    shape.stop()
    shape.processes.clear()
    shape.port = free_port()
    shape.start_web()
    shape.start_worker()


def worker_pids(shape: Shape) -> list[int]:
    """uvicorn's worker processes (spawned by multiprocessing; its resource tracker is not one)."""
    master = next(popen.pid for name, popen, _ in shape.processes if name == "uvicorn")
    workers = []
    for pid in children(master):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            workers.append(pid)
    return workers


def start_profilers(pids: list[int], seconds: float, out: Path) -> list[subprocess.Popen[bytes]]:
    out.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [
                str(BIN / "py-spy"),
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(max(1, round(seconds))),
                "--rate",
                "200",
                "--format",
                "raw",
                # Only samples holding the GIL: Python on the CPU, not a thread waiting on
                # PostgreSQL or an idle event loop (py-spy's idle detection misses those).
                "--gil",
                "--nonblocking",
                "--output",
                str(out / f"worker-{pid}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _short(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``func (module path from site-packages or the repo)``."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", str(ROOT) + "/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match['func']} ({path})"


# Where a battle's server CPU goes: the share of samples with any frame matching (a sample may
# count in several; the groups overlap, e.g. a session save is also ORM work).
COST_CENTRES: dict[str, tuple[str, ...]] = {
    "HTTP vote (vote_create view, whole request)": ("vote_create (",),
    "vote over the socket (vote_over_socket)": ("vote_over_socket (",),
    "live battle start (battle_start_live)": ("battle_start_live (",),
    "turn end save + payload (turn_finish)": ("turn_finish (",),
    "partial saves while streaming (progress_saver)": ("ProgressSaver", "progress_save"),
    "upstream streaming (stream_answer, openai client)": ("stream_answer (",),
    "openai client internals": ("(openai/",),
    "httpx / aiohttp transport": ("(httpx", "(aiohttp/"),
    "websocket frames out (uvicorn ws send)": ("WebSocketsSansIOProtocol.send (",),
    "JSON encode/decode": ("(json/",),
    "Django ORM: SQL compile": ("SQLCompiler.as_sql (", "SQLCompiler.compile ("),
    "Django ORM: query execute (psycopg)": ("CursorWrapper._execute (",),
    "DB connection open (psycopg connect)": ("Connection.connect (", "get_new_connection ("),
    "DB connection close / upkeep": ("close_old_connections (", "BaseDatabaseWrapper.close ("),
    "sessions (load/save)": ("(django/contrib/sessions/",),
    "Redis (cache, sessions, Celery enqueue)": ("(redis/",),
    "Celery / kombu (task enqueue)": ("(celery/", "(kombu/"),
    "channels (auth/session middleware, consumer base)": ("(channels/",),
    "asgiref thread hops (sync_to_async / async_to_sync)": ("(asgiref/",),
    "Django middleware stack (HTTP)": ("MiddlewareMixin.__call__ (",),
    "logging": ("(logging/",),
    "uvicorn HTTP protocol": ("(uvicorn/protocols/http/",),
}


# What a sample was doing for a battle: the innermost of these frames on its stack (a token's
# frame sent from inside the upstream stream counts as the frame sent). Exclusive: adds to 100%.
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("websocket frames out (deltas, side_end, turn_start/end)", ("on_delta (", "._send_text (")),
    ("turn end save + payload (turn_finish)", ("turn_finish (",)),
    ("battle start (battle_start_live)", ("battle_start_live (",)),
    ("upstream stream: openai client, SSE parse, transport", ("stream_answer (",)),
    ("HTTP requests (the vote): middleware + view", ("convert_exception_to_response",)),
    ("the vote over the socket (vote_over_socket)", ("vote_over_socket (",)),
    ("database thread hop (arena.live.runtime.db)", ("db.<locals>.call (",)),
    ("websocket receive + dispatch", ("BattleConsumer.receive (", "websocket_receive (")),
)


def _phase(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, needles in PHASES:
            if any(needle in frame for needle in needles):
                return name
    return "other (event loop, uvicorn, thread pool, imports)"


def _package(frame: str) -> str:
    """The top-level package of a shortened frame (``psycopg``, ``django``, ``arena``...)."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    if path.startswith("<frozen"):
        return "importlib (imports)"
    head = path.split("/", 1)[0]
    return head.removesuffix(".py")


def summarise_profile(files: list[Path], top: int = 25) -> str:
    """The heaviest frames of py-spy's collapsed stacks, by own and by cumulative samples."""
    own: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    centres: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    total = 0
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            samples = int(count)
            total += samples
            frames = [_short(f) for f in stack.split(";")]
            own[frames[-1]] += samples
            packages[_package(frames[-1])] += samples
            phases[_phase(frames)] += samples
            for frame in set(frames):
                cumulative[frame] += samples
            for name, needles in COST_CENTRES.items():
                if any(needle in frame for frame in frames for needle in needles):
                    centres[name] += samples
    if not total:
        return "no samples"
    lines = [f"{total} samples holding the GIL (both workers, 200/s)", "", "phases (add to 100%):"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in phases.most_common()]
    lines += ["", "cost centres (overlapping: a sample counts in each that is on its stack):"]
    lines += [f"  {100 * centres[name] / total:5.1f}%  {name}" for name in COST_CENTRES]
    lines += ["", "own time by package (adds up to 100%):"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in packages.most_common(top)]
    lines += ["", "own time:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines += ["", "cumulative time:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in cumulative.most_common(top * 2)]
    return "\n".join(lines)


# --- the report -------------------------------------------------------------------------------
def row(level: Level, used: Cpu, seconds: float, direct_ms: float, stored: int) -> dict:
    window = level.window()
    n = len(window)
    per = 1000 / max(1, n)
    overhead = [d.battle_ms - direct_ms for d in window]
    return {
        "visitors": level.visitors,
        "battles": n,
        "battles_per_s": n / seconds,
        "ttft_p50": percentile([d.ttft_ms for d in window], 50),
        "ttft_p99": percentile([d.ttft_ms for d in window], 99),
        "overhead_p50": percentile(overhead, 50),
        "overhead_p99": percentile(overhead, 99),
        "vote_p50": percentile([d.vote_ms for d in window], 50),
        "vote_p99": percentile([d.vote_ms for d in window], 99),
        "errors": sum(level.errors.values()),
        "error_kinds": dict(level.errors),
        "acknowledged": len(level.done),
        "stored": stored,
        "web_cpu_ms": used.web * per,
        "worker_cpu_ms": used.worker * per,
        "postgres_cpu_ms": used.postgres * per,
        "redis_cpu_ms": used.redis * per,
        "client_cpu_ms": used.client * per,
        "machine_load": os.getloadavg()[0],
    }


def table(rows: list[dict], baseline: list[dict] | None = None) -> str:
    """The rows as a Markdown table; with ``baseline`` rows (another tree, the same run), a
    column of battles/s against the baseline's at the same level."""
    same_run = {r["visitors"]: r["battles_per_s"] for r in baseline or []}
    lines = [
        "| visitors | battles/s | vs FastChat 7.0 | vs before "
        + ("| vs baseline, same run " if same_run else "")
        + "| TTFT p50/p99 ms "
        "| overhead p50/p99 ms | vote p50/p99 ms | errors | acked / in DB "
        "| uvicorn CPU ms/battle | Celery | PostgreSQL* | Redis* | client | RSS/worker MB "
        "| DB conns/battle |",
        "|---:" * (16 + bool(same_run)) + "|",
    ]
    for r in rows:
        before = BEFORE.get(r["visitors"])
        vs_before = f"{r['battles_per_s'] / before:.2f}x" if before else "-"
        if same_run:
            base = same_run.get(r["visitors"])
            vs_before += f" | {r['battles_per_s'] / base:.2f}x" if base else " | -"
        lines.append(
            f"| {r['visitors']} | {r['battles_per_s']:.1f} "
            f"| {r['battles_per_s'] / FASTCHAT_PEAK:.2f}x | {vs_before} "
            f"| {r['ttft_p50']:.0f} / {r['ttft_p99']:.0f} "
            f"| {r['overhead_p50']:.0f} / {r['overhead_p99']:.0f} "
            f"| {r['vote_p50']:.0f} / {r['vote_p99']:.0f} | {r['errors']} "
            f"| {r['acknowledged']} / {r['stored']} "
            f"| {r['web_cpu_ms']:.1f} | {r['worker_cpu_ms']:.1f} | {r['postgres_cpu_ms']:.1f} "
            f"| {r['redis_cpu_ms']:.1f} | {r['client_cpu_ms']:.1f} "
            f"| {' + '.join(f'{x:.0f}' for x in r['rss_mb'])} | {r['connections']:.1f} |"
        )
    return "\n".join(lines)


def pg_stats(database: Database) -> dict[str, int]:
    """PostgreSQL's counters for the bench database: connections opened, transactions."""
    rows = database.query(
        "SELECT sessions, xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
        database.name,
    )
    return {"connections": int(rows[0][0]), "transactions": int(rows[0][1])}


_STATEMENT = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)")
_TABLE = re.compile(r'(?:FROM|INTO|UPDATE|JOIN)\s+"?(\w+)"?', re.IGNORECASE)


def statement_kind(sql: str) -> str:
    """``SELECT arena_battle``, ``INSERT arena_vote``, ``BEGIN``...: the verb and first table."""
    verb = sql.split(None, 1)[0].upper() if sql.strip() else "?"
    table = _TABLE.search(sql)
    return (
        f"{verb} {table[1]}" if table and verb in ("SELECT", "INSERT", "UPDATE", "DELETE") else verb
    )


def count_statements(log: Path, start: int, end: int, dbname: str) -> Counter[str]:
    """Statements PostgreSQL logged for ``dbname`` between two offsets of its log."""
    kinds: Counter[str] = Counter()
    with log.open("rb") as handle:
        handle.seek(start)
        text = handle.read(end - start).decode(errors="replace")
    marker = f"@{dbname} "
    for line in text.splitlines():
        if marker in line:
            match = _STATEMENT.search(line)
            if match:
                kinds[statement_kind(match[1])] += 1
    return kinds


@dataclass
class Window:
    """What is read as the measured window opens and closes: PostgreSQL's counters, the
    offsets of its log (statements), and py-spy on the workers."""

    database: Database
    pids: list[int]
    seconds: float
    out: Path | None
    pg_log: Path | None
    stats: dict[str, int] = field(default_factory=dict)
    offsets: list[int] = field(default_factory=list)
    profilers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def mark(self, opening: bool) -> None:
        now = pg_stats(self.database)
        if self.pg_log is not None:
            self.offsets.append(self.pg_log.stat().st_size)
        if opening:
            self.stats = now
            if self.out is not None:
                self.profilers = start_profilers(self.pids, self.seconds, self.out)
        else:
            self.stats = {k: now[k] - self.stats[k] for k in now}

    def statements(self) -> Counter[str]:
        if self.pg_log is None or len(self.offsets) < 2:
            return Counter()
        return count_statements(self.pg_log, *self.offsets[:2], self.database.name)


def measure_level(
    tree: Tree,
    visitors: int,
    warmup: float,
    seconds: float,
    direct_ms: float,
    profile_out: Path | None,
    pg_log: Path | None,
    vote_over: str = "ws",
) -> tuple[dict, list[Path]]:
    """One level on a fresh server of ``tree``: its row (printed) and the profile files."""
    import uvloop

    shape, database = tree.shape, tree.database
    fresh_server(shape)
    # Warm-up: every request on a new connection, so that both workers (the kernel
    # hands each connection to one) import what the first page, vote and battle need.
    uvloop.run(run_level(shape.url, 8, 0.0, 6.0, shape, force_close=True, vote_over=vote_over))
    window = Window(database, worker_pids(shape), seconds, profile_out, pg_log)
    level, used = uvloop.run(
        run_level(shape.url, visitors, warmup, seconds, shape, window.mark, vote_over=vote_over)
    )
    shape.check_alive(f"level {visitors}")
    for profiler in window.profilers:
        profiler.wait(timeout=60)
    files = sorted(window.out.glob("worker-*.txt")) if window.out is not None else []
    result = row(
        level, used, seconds, direct_ms, stored_votes(database, [d.battle_id for d in level.done])
    )
    result["tree"] = tree.label
    result["vote_over"] = vote_over
    result["rss_mb"] = [rss_mb(pid) for pid in worker_pids(shape)]
    n = max(1, result["battles"])
    result["connections"] = window.stats["connections"] / n
    result["transactions"] = window.stats["transactions"] / n
    statements = window.statements()
    result["statements"] = sum(statements.values()) / n if pg_log else math.nan
    result["statement_kinds"] = {k: v / n for k, v in statements.most_common()}
    prefix = f"[{tree.label}] " if tree.worktree else ""
    print(
        f"{prefix}{visitors:>4} visitors, vote over {vote_over}: "
        f"{result['battles_per_s']:.1f} battles/s, TTFT p50/p99 "
        f"{result['ttft_p50']:.0f}/{result['ttft_p99']:.0f} ms, overhead p50/p99 "
        f"{result['overhead_p50']:.0f}/{result['overhead_p99']:.0f} ms, vote p50/p99 "
        f"{result['vote_p50']:.0f}/{result['vote_p99']:.0f} ms, errors "
        f"{result['error_kinds'] or 0}, acked/in DB {result['acknowledged']}/"
        f"{result['stored']}, CPU ms per battle: uvicorn {result['web_cpu_ms']:.1f}, "
        f"celery {result['worker_cpu_ms']:.1f}, postgres* "
        f"{result['postgres_cpu_ms']:.1f}, redis* {result['redis_cpu_ms']:.1f}, client "
        f"{result['client_cpu_ms']:.1f}; RSS per worker "
        f"{', '.join(f'{x:.0f}' for x in result['rss_mb'])} MB; per battle: "
        f"{result['connections']:.1f} PostgreSQL connections opened, "
        f"{result['transactions']:.1f} transactions"
        + (f", {result['statements']:.1f} statements" if pg_log else "")
        + f"; machine load {result['machine_load']:.1f}",
        flush=True,
    )
    if pg_log is not None:
        kinds = result["statement_kinds"]
        print("  statements per battle: " + ", ".join(f"{k} {v:.1f}" for k, v in kinds.items()))
    return result, files


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--levels", default="1,10,50,100,200", help="visitors per level")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window per level")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--tokens", type=int, default=26, help="content chunks per answer")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument("--quick", action="store_true", help="levels 1,10 for 8 s each")
    parser.add_argument("--profile", type=Path, help="py-spy both workers; raw stacks here")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument(
        "--count-queries",
        type=Path,
        metavar="POSTGRES_LOG",
        help="count the statements per battle: log_statement=all on the bench database "
        "(ALTER DATABASE, superuser), read back from this PostgreSQL server log file",
    )
    parser.add_argument("--keep-logs", action="store_true", help="print the process logs' path")
    parser.add_argument(
        "--vote-over",
        choices=("ws", "http"),
        default="ws",
        help="the vote: a frame on the battle socket (what the page does, the default) or "
        "POST /api/battles/<id>/vote",
    )
    parser.add_argument(
        "--baseline-vote-over",
        choices=("ws", "http"),
        default="http",
        help="the --baseline tree's vote: over HTTP by default (a tree from before the vote "
        "frame has none); ws for a baseline that has it, to compare like with like",
    )
    add_tree_arguments(parser)
    args = parser.parse_args()
    if args.baseline:
        Tree.resolve(args.baseline)  # a bad revision ends the run before anything starts
    levels = [int(x) for x in args.levels.split(",")]
    seconds, warmup = args.seconds, args.warmup
    if args.quick:
        levels, seconds, warmup = [1, 10], 8.0, 2.0

    import uvloop

    upstream = subprocess.Popen(
        [
            str(BIN / "python"),
            "-c",
            UPSTREAM.format(root=str(ROOT), host="127.0.0.1", tokens=args.tokens, delay=args.delay),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert upstream.stdout is not None
    upstream_url = f"http://127.0.0.1:{int(upstream.stdout.readline())}/v1"
    extra = dict(item.split("=", 1) for item in args.env)
    settings = BENCH_ENV | extra
    trees: list[Tree] = []
    rows: list[dict] = []
    baseline_rows: list[dict] = []
    profiles: dict[int, list[Path]] = {}
    direct_ms = math.nan
    started = time.monotonic()
    try:
        current = open_trees(trees, args, "arena_bench_battles", settings)
        print(f"settings changed for the bench: {settings}", flush=True)
        print(
            f"vote over: {args.vote_over}"
            + (
                f" (the baseline, {args.baseline}: {args.baseline_vote_over})"
                if args.baseline
                else ""
            ),
            flush=True,
        )
        direct_ms = uvloop.run(direct_stream_ms(upstream_url))
        print(
            f"fake upstream: {args.tokens} chunks {args.delay} s apart; direct stream "
            f"(median of 7, idle) {direct_ms:.0f} ms",
            flush=True,
        )
        for tree in trees:
            tree.prepare(live_models=LIVE_MODELS, upstream_url=upstream_url)
        pg_log = args.count_queries
        if pg_log is not None:
            import psycopg

            with psycopg.connect(current.database.url, autocommit=True) as conn:
                conn.execute(
                    f"ALTER DATABASE \"{current.database.name}\" SET log_statement = 'all'"
                )
        print(f"set up in {time.monotonic() - started:.0f} s", flush=True)
        for visitors in levels:
            for tree in trees:
                is_current = tree is current
                result, files = measure_level(
                    tree,
                    visitors,
                    warmup,
                    seconds,
                    direct_ms,
                    args.profile / f"level-{visitors}" if args.profile and is_current else None,
                    pg_log if is_current else None,
                    args.vote_over if is_current else args.baseline_vote_over,
                )
                (rows if is_current else baseline_rows).append(result)
                if files:
                    profiles[visitors] = files
    finally:
        close_trees(trees, args.keep_logs)
        upstream.send_signal(signal.SIGTERM)
        upstream.wait(timeout=15)
    print()
    print(
        f"Whole live battles, closed loop, no think time; fake upstream {args.tokens} chunks "
        f"{args.delay} s apart, direct stream {direct_ms:.0f} ms (the overhead's anchor); "
        f"window {seconds:g} s after {warmup:g} s warm-up, fresh server per level; vote over "
        f"{args.vote_over}"
        + (f" (the baseline: {args.baseline_vote_over})" if baseline_rows else "")
        + "; "
        f"{time.monotonic() - started:.0f} s in all."
    )
    if not rows:
        return
    print(table(rows, baseline_rows))
    if baseline_rows:
        print(f"\nThe baseline, {args.baseline}, in the same run:")
        print(table(baseline_rows))
    print(
        f"vs FastChat 7.0: battles/s / 7.0, FastChat 0.2.36's peak on this machine (the throughput pass's "
        f"figure, not measured here; bench/fastchat.py measures both in one run). vs before: / the throughput pass's 'before' table ({BEFORE}). "
        f"*PostgreSQL and Redis CPU: the whole servers, shared with anything else running "
        f"(an upper bound). client: this script's own CPU per battle."
    )
    best = max(rows, key=lambda r: r["battles_per_s"])
    ten = next((r for r in rows if r["visitors"] == 10), None)
    saturated_cpu = best["web_cpu_ms"]
    rss = max((x for r in rows for x in r["rss_mb"]), default=math.nan)
    overhead_ten = f"{ten['overhead_p99']:.0f} ms" if ten else "not run"
    print(
        f"Targets: >= {TARGET_BATTLES_PER_S:g} battles/s saturated: best "
        f"{best['battles_per_s']:.1f} at {best['visitors']} visitors "
        f"({best['battles_per_s'] / TARGET_BATTLES_PER_S:.2f}x); uvicorn CPU per battle "
        f"< {TARGET_CPU_MS:g} ms: {saturated_cpu:.1f} ms there; overhead p99 at 10 visitors "
        f"< {TARGET_OVERHEAD_P99_MS:g} ms: "
        f"{overhead_ten}; RSS per worker "
        f"< {TARGET_RSS_MB:g} MB: max {rss:.0f} MB; lost votes: "
        f"{sum(r['acknowledged'] - r['stored'] for r in rows)}; machine load (1 min) at the end "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs."
    )
    if args.profile:
        print()
        for visitors, files in profiles.items():
            print(f"\nProfile of the uvicorn workers at {visitors} visitors:")
            print(summarise_profile(files))
    if args.json:  # each row names its tree
        args.json.write_text(json.dumps(baseline_rows + rows, indent=2))


if __name__ == "__main__":
    main()
