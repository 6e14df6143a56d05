"""Whole live battles, Arena against FastChat 0.2.36 measured in the same run (not a timed test).

    .venv/bin/python bench/fastchat.py [--levels 10,50] [--seconds 15] [--warmup 3]
        [--tokens 26] [--delay 0.02] [--concurrency-count 10] [--skip-arena] [--wait-ci 1800]

1. FastChat 0.2.36 from PyPI (``fschat[model_worker,webui]==0.2.36`` and the gradio, fastapi,
   pydantic, openai, transformers versions of its time, ``PINS``) in ``bench/.venv-fastchat``,
   a Python 3.11 virtualenv made on the first run (git-ignored). Its import of the local-model
   adapters needs torch and transformers though no model is loaded: torch is the CPU wheel pip
   finds on this machine's disk. The wheel lacks the vision tab's two example images
   (``fastchat/serve/example_images``, read at start-up even with the tab hidden): two 8x8
   placeholders are written there. Nothing else is fetched; no model weights.
2. One fake OpenAI-compatible upstream on loopback, the one bench/battles.py starts (its own
   process, ``--tokens`` chunks ``--delay`` s apart), shared by both servers.
3. FastChat: per level a fresh ``python -m fastchat.serve.gradio_web_server_multi`` (the
   battle tab of lmsys' arena; one process, gradio 4.19's queue with
   ``--concurrency-count`` per event handler, FastChat's default 10) with no controller
   (``--controller-url ''``) and two models in ``--register-api-endpoint-file`` (``api_type:
   openai``, ``api_base`` the fake). Each visitor speaks gradio's browser protocol (sse_v2, as
   the page's JavaScript client does; gradio_client's threads would cost the shared 2 cores
   more): ``GET /`` (the page, its config inlined) and the page's ``load_demo`` event, not
   timed; then with no think time: the textbox's submit (``add_text``) -> its chained
   ``bot_response_multi`` (both answers streamed, read to the end, both checked whole) ->
   the chained ``flash_buttons`` sent as the page does (not waited for) and a vote
   (``leftvote``/``rightvote``/``tievote`` in turn) -> "New Round" (``clear_history``) -> the
   next battle. Every event is ``POST /queue/join`` and its messages arrive on the session's
   ``GET /queue/data`` event stream (reopened when the server closes it).
   A vote counts when its first ``process_generating`` arrives: FastChat has appended it to
   its conversation log (``LOGDIR``) before that yield; the rest of the handler is the name
   reveal (5 x 0.1 s sleeps), which a visitor need not wait for (the "New Round" button is not
   among its outputs). Counted votes are checked against the log's vote lines.
4. Arena: bench/battles.py's closed loop on the production shape at the same levels
   (``measure_level``: fresh ``bin/serve`` and Celery worker per level, its own database and a
   claimed Redis db among 10-15), with its settings and no cap on one address's battle
   sockets (``ARENA_WS_MAX_PER_ADDRESS=0``: every visitor is 127.0.0.1). CI uses those Redis dbs: the run first waits up to
   ``--wait-ci`` seconds for ``pgrep -f ci-check`` to find nothing (polling every 30 s; past
   that, FastChat's part alone runs), then alternates the two servers level by level so that
   both meet the same load on the machine.
5. Both after ``--warmup`` seconds: battles/s counts the battles whose vote was acknowledged
   inside the ``--seconds`` window. Battle time: the prompt sent -> both answers whole (Arena:
   ``start`` -> ``turn_end``; FastChat: ``add_text`` joined -> ``bot_response_multi``
   completed); vote: sent -> acknowledged. Server CPU per battle: FastChat's one process;
   Arena's uvicorn workers plus the Celery worker (PostgreSQL and Redis not counted).

The client (this script) shares the 2 cores with both servers; the load average is printed
per level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.battles import (  # noqa: E402
    BENCH_ENV,
    LIVE_MODELS,
    UPSTREAM,
    Done,
    Level,
    direct_stream_ms,
    measure_level,
    percentile,
)
from bench.shape import BIN, USER_AGENT, Tree, close_trees, free_port, open_trees  # noqa: E402

FASTCHAT_VENV = ROOT / "bench" / ".venv-fastchat"
FASTCHAT_PYTHON = "python3.11"  # FastChat 0.2.36's time (Feb 2024); torch's wheel on disk
PINS = (
    "fschat[model_worker,webui]==0.2.36",
    "gradio==4.19.2",
    "gradio_client==0.10.1",
    "fastapi==0.109.2",
    "pydantic==2.6.1",
    "uvicorn==0.27.1",
    "httpx==0.26.0",
    "huggingface_hub==0.20.3",
    "openai==1.12.0",
    "numpy<2",
    "plotly==5.19.0",
    "torch==2.13.0+cpu",
    "transformers==4.37.2",
    "accelerate==0.27.2",
    "peft==0.8.2",
    "protobuf<5",
)
# bench/battles.py's settings, and no cap on the battle sockets of one address: every visitor
# here is 127.0.0.1, and FastChat's server has no such cap (production's 32 would turn 18 of 50
# visitors away at the door).
ARENA_SETTINGS = BENCH_ENV | {"ARENA_WS_MAX_PER_ADDRESS": "0"}
VOTES = ("leftvote_last_response", "rightvote_last_response", "tievote_last_response")
VOTE_TYPES = ("leftvote", "rightvote", "tievote")


# --- installing FastChat ----------------------------------------------------------------------
def fastchat_python() -> Path:
    """bench/.venv-fastchat's Python with ``PINS`` installed (made on the first run)."""
    python = FASTCHAT_VENV / "bin" / "python"
    stamp = FASTCHAT_VENV / ".installed"
    wanted = "\n".join(PINS)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    base = shutil.which(FASTCHAT_PYTHON)
    if base is None:
        sys.exit(f"{FASTCHAT_PYTHON} not found: FastChat 0.2.36 needs a Python of its time")
    if not python.exists():
        print(f"creating {FASTCHAT_VENV} with FastChat 0.2.36 ...", flush=True)
        subprocess.run([base, "-m", "venv", str(FASTCHAT_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
        check=True,
    )
    # The wheel lacks the vision tab's example images, which start-up reads even with the tab
    # hidden: placeholders (they are never shown to these visitors).
    subprocess.run(
        [
            str(python),
            "-c",
            "import os, fastchat.serve as s\n"
            "from PIL import Image\n"
            "d = os.path.join(os.path.dirname(s.__file__), 'example_images')\n"
            "os.makedirs(d, exist_ok=True)\n"
            "for n in ('city', 'fridge'):\n"
            "    p = os.path.join(d, n + '.jpeg')\n"
            "    os.path.exists(p) or Image.new('RGB', (8, 8)).save(p)\n",
        ],
        check=True,
        capture_output=True,
    )
    stamp.write_text(wanted)
    return python


# --- FastChat's server ------------------------------------------------------------------------
@dataclass
class Events:
    """The fn_index and trigger of each event of the battle tab a visitor sends."""

    load: tuple[int, int | None]
    add_text: tuple[int, int | None]
    bot: tuple[int, int | None]
    flash: tuple[int, int | None]
    clear: tuple[int, int | None]
    votes: list[tuple[int, int | None]]
    bot_inputs: list[object]  # the sliders' values (temperature, top_p, max tokens)

    @classmethod
    def from_config(cls, config: dict) -> Events:
        deps = config["dependencies"]
        components = {c["id"]: c for c in config["components"]}

        def first(name: str) -> int:
            return next(i for i, d in enumerate(deps) if d.get("api_name") == name)

        def after(index: int) -> int:
            return next(i for i, d in enumerate(deps) if d.get("trigger_after") == index)

        def event(index: int) -> tuple[int, int | None]:
            return index, deps[index]["targets"][0][0]

        # The battle tab's textbox submit is the first add_text; its chain follows it.
        add_text = first("add_text")
        bot = after(add_text)
        return cls(
            load=event(first("load_demo")),
            add_text=event(add_text),
            bot=event(bot),
            flash=event(after(bot)),
            clear=event(first("clear_history")),
            votes=[event(first(name)) for name in VOTES],
            bot_inputs=[components[i]["props"].get("value") for i in deps[bot]["inputs"][2:]],
        )


@dataclass
class FastChatServer:
    python: Path
    upstream_url: str
    concurrency: int
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-fastchat-")))
    process: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> dict:
        """A fresh server on a new port and a new log folder; its config once it answers."""
        import urllib.request

        self.stop()
        self.port = free_port()
        logdir = Path(tempfile.mkdtemp(prefix="logs-", dir=self.tmp))
        endpoints = {
            slug: {
                "model_name": slug,
                "api_type": "openai",
                "api_base": self.upstream_url,
                "api_key": "bench",
                "anony_only": False,
            }
            for slug in LIVE_MODELS
        }
        (logdir / "api_endpoints.json").write_text(json.dumps(endpoints))
        self.logdir = logdir
        self.process = subprocess.Popen(
            [
                str(self.python),
                "-m",
                "fastchat.serve.gradio_web_server_multi",
                "--host=127.0.0.1",
                f"--port={self.port}",
                "--controller-url=",
                f"--register-api-endpoint-file={logdir / 'api_endpoints.json'}",
                f"--concurrency-count={self.concurrency}",
            ],
            cwd=logdir,
            env=os.environ | {"LOGDIR": str(logdir), "GRADIO_ANALYTICS_ENABLED": "False"},
            stdout=(logdir / "server.out").open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (logdir / "server.out").read_text()[-3000:]
                sys.exit(f"FastChat's web server exited:\n{tail}")
            try:
                with urllib.request.urlopen(self.url + "/config", timeout=5) as response:
                    return json.loads(response.read())
            except OSError:
                time.sleep(0.5)
        sys.exit("FastChat's web server did not answer within 180 s")

    def cpu_seconds(self) -> float:
        if self.process is None:
            return math.nan
        with open(f"/proc/{self.process.pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def logged_votes(self) -> int:
        """Vote lines in FastChat's conversation logs (``<date>-conv.json``)."""
        count = 0
        for path in self.logdir.glob("*-conv.json"):
            for line in path.read_text().splitlines():
                if json.loads(line).get("type") in VOTE_TYPES:
                    count += 1
        return count

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


# --- gradio's browser protocol ----------------------------------------------------------------
class Failed(RuntimeError):
    pass


class Session:
    """One page's gradio session: events joined with ``POST /queue/join``, their messages read
    from the session's ``GET /queue/data`` stream (sse_v2), which the server closes when no
    event of the session is pending; it is reopened for the next one, as gradio's JS does."""

    def __init__(self, http: object) -> None:
        self.http = http
        self.hash = "".join(random.choices(string.ascii_lowercase + string.digits, k=11))
        self.events: dict[str, asyncio.Queue[dict | None]] = {}
        self.early: dict[str, list[dict]] = {}
        self.reader: asyncio.Task[None] | None = None

    async def join(self, fn: tuple[int, int | None], data: list[object]) -> asyncio.Queue:
        import aiohttp

        assert isinstance(self.http, aiohttp.ClientSession)
        body = {
            "data": data,
            "event_data": None,
            "fn_index": fn[0],
            "trigger_id": fn[1],
            "session_hash": self.hash,
        }
        async with self.http.post("/queue/join", json=body) as response:
            reply = json.loads(await response.read())
            if response.status != 200:
                raise Failed(f"join {response.status}")
        queue: asyncio.Queue[dict | None] = asyncio.Queue()
        event_id = reply["event_id"]
        self.events[event_id] = queue
        for message in self.early.pop(event_id, []):
            queue.put_nowait(message)
        if self.reader is None or self.reader.done():
            self.reader = asyncio.create_task(self._read())
        return queue

    async def _read(self) -> None:
        import aiohttp

        assert isinstance(self.http, aiohttp.ClientSession)
        while self.events:
            try:
                async with self.http.get(f"/queue/data?session_hash={self.hash}") as response:
                    if response.status != 200:
                        raise Failed(f"stream {response.status}")
                    async for line in response.content:
                        if line.startswith(b"data:"):
                            self._dispatch(json.loads(line[5:]))
            except (aiohttp.ClientError, TimeoutError, Failed, ValueError):
                for queue in self.events.values():
                    queue.put_nowait(None)
                self.events.clear()
                return

    def _dispatch(self, message: dict) -> None:
        event_id = message.get("event_id")
        if event_id is None:
            if message.get("msg") == "unexpected_error":
                for queue in self.events.values():
                    queue.put_nowait(None)
                self.events.clear()
            return
        queue = self.events.get(event_id)
        if queue is None:
            self.early.setdefault(event_id, []).append(message)
            return
        queue.put_nowait(message)
        if message.get("msg") == "process_completed":
            del self.events[event_id]

    async def run(self, fn: tuple[int, int | None], data: list[object]) -> dict:
        """Join an event and wait for its ``process_completed``; its output."""
        queue = await self.join(fn, data)
        while True:
            message = await asyncio.wait_for(queue.get(), timeout=120)
            if message is None:
                raise Failed("stream lost")
            if message["msg"] == "process_completed":
                if not message.get("success"):
                    raise Failed("event failed")
                return message["output"]

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            await asyncio.gather(self.reader, return_exceptions=True)


def whole(chat: object, tokens: int) -> bool:
    """A chatbot's last answer is the fake's whole answer (FastChat shows an error as text)."""
    return (
        isinstance(chat, list)
        and bool(chat)
        and isinstance(chat[-1], list)
        and str(chat[-1][1]).endswith(f"tok{tokens - 1}")
    )


async def fastchat_visitor(
    base: str, events: Events, level: Level, index: int, tokens: int
) -> None:
    import aiohttp

    async with aiohttp.ClientSession(
        base_url=base,
        timeout=aiohttp.ClientTimeout(total=None, sock_read=120),
        headers={"User-Agent": USER_AGENT},
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0),
    ) as http:
        session = Session(http)
        try:
            async with http.get("/") as response:
                await response.read()
                if response.status != 200:
                    raise Failed(f"page {response.status}")
            await session.run(events.load, [{}])  # the page's load event (URL params)
        except (aiohttp.ClientError, TimeoutError, Failed) as exc:
            level.errors[f"sign-up {exc}"[:80]] += 1
            level.ready += 1
            return
        level.ready += 1
        await level.go.wait()
        n = 0
        try:
            while time.monotonic() < level.stop_at:
                n += 1
                prompt = f"Visitor {index}, battle {n}: count to ten in words, please."
                try:
                    if n > 1:
                        await session.run(events.clear, [])  # "New Round"
                    t0 = time.perf_counter()
                    await session.run(events.add_text, [None, None, "", "", prompt])
                    queue = await session.join(events.bot, [None, None, *events.bot_inputs])
                    first = 0.0
                    while True:
                        message = await asyncio.wait_for(queue.get(), timeout=120)
                        if message is None:
                            raise Failed("stream lost")
                        if not first and message["msg"] == "process_generating":
                            if "tok0" in json.dumps(message["output"]["data"]):
                                first = time.perf_counter()
                        if message["msg"] == "process_completed":
                            break
                    end = time.perf_counter()
                    data = message.get("output", {}).get("data") or [None] * 4
                    if not (
                        message.get("success") and all(whole(chat, tokens) for chat in data[2:4])
                    ):
                        level.errors["answer not whole"] += 1
                        continue
                    await session.join(events.flash, [])  # chained by the page, not awaited
                    t2 = time.perf_counter()
                    vote = await session.join(events.votes[n % 3], [None, None, "", ""])
                    while True:
                        message = await asyncio.wait_for(vote.get(), timeout=120)
                        if message is None:
                            raise Failed("stream lost")
                        if message["msg"] in ("process_generating", "process_completed"):
                            break
                    if not message.get("success", True) or "output" not in message:
                        level.errors["vote failed"] += 1
                        continue
                except (aiohttp.ClientError, TimeoutError, Failed) as exc:
                    level.errors[f"battle {type(exc).__name__} {exc}"[:80]] += 1
                    return
                level.done.append(
                    Done(
                        f"{session.hash}-{n}",
                        time.monotonic(),
                        (first - t0) * 1000 if first else math.nan,
                        (end - t0) * 1000,
                        (time.perf_counter() - t2) * 1000,
                    )
                )
        finally:
            await session.close()


async def fastchat_level(
    server: FastChatServer,
    events: Events,
    visitors: int,
    warmup: float,
    seconds: float,
    tokens: int,
) -> tuple[Level, float, float]:
    """Sign every visitor up, run them, and measure the window: the level, and the server's and
    this client's CPU seconds over it."""
    level = Level(visitors)
    tasks = [
        asyncio.create_task(fastchat_visitor(server.url, events, level, i, tokens))
        for i in range(visitors)
    ]
    deadline = time.monotonic() + 180
    while level.ready < visitors and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    level.measure_from = time.monotonic() + warmup
    level.stop_at = level.measure_from + seconds
    level.go.set()
    await asyncio.sleep(max(0.0, level.measure_from - time.monotonic()))
    before, mine = server.cpu_seconds(), os.times()
    await asyncio.sleep(max(0.0, level.stop_at - time.monotonic()))
    used = server.cpu_seconds() - before
    after = os.times()
    client = after.user + after.system - mine.user - mine.system
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=300)
    return level, used, client


def measure_fastchat(
    server: FastChatServer, visitors: int, warmup: float, seconds: float, tokens: int
) -> dict:
    import uvloop

    config = server.start()
    events = Events.from_config(config)
    warm, _, _ = uvloop.run(fastchat_level(server, events, 4, 0.0, 4.0, tokens))  # first calls
    level, used, client = uvloop.run(
        fastchat_level(server, events, visitors, warmup, seconds, tokens)
    )
    time.sleep(1.0)  # the last reveals end; every counted vote is in the log by then
    if server.process is None or server.process.poll() is not None:
        sys.exit(f"FastChat's web server died at {visitors} visitors")
    window = level.window()
    n = len(window)
    logged = server.logged_votes()  # the warm-up's too
    counted = len(warm.done) + len(level.done)
    result = {
        "visitors": visitors,
        "battles": n,
        "battles_per_s": n / seconds,
        "battle_p50": percentile([d.battle_ms for d in window], 50),
        "battle_p99": percentile([d.battle_ms for d in window], 99),
        "ttft_p50": percentile([d.ttft_ms for d in window if not math.isnan(d.ttft_ms)], 50),
        "vote_p50": percentile([d.vote_ms for d in window], 50),
        "vote_p99": percentile([d.vote_ms for d in window], 99),
        "server_cpu_ms": used * 1000 / max(1, n),
        "client_cpu_ms": client * 1000 / max(1, n),
        "errors": dict(level.errors),
        "acknowledged": len(level.done),
        "counted": counted,
        "logged": logged,
        "machine_load": os.getloadavg()[0],
    }
    print(
        f"[FastChat 0.2.36] {visitors:>4} visitors: {result['battles_per_s']:.1f} battles/s, "
        f"battle p50/p99 {result['battle_p50']:.0f}/{result['battle_p99']:.0f} ms, TTFT p50 "
        f"{result['ttft_p50']:.0f} ms, vote p50/p99 {result['vote_p50']:.0f}/"
        f"{result['vote_p99']:.0f} ms, errors {result['errors'] or 0}, server CPU "
        f"{result['server_cpu_ms']:.1f} ms per battle (client {result['client_cpu_ms']:.1f}), votes counted/in FastChat's log "
        f"{counted}/{logged} (with the warm-up's); machine load {result['machine_load']:.1f}",
        flush=True,
    )
    server.stop()
    return result


# --- Arena's part -----------------------------------------------------------------------------
def wait_for_ci(limit: float) -> bool:
    """True once ``pgrep -f ci-check`` finds nothing (polled every 30 s for up to ``limit``)."""
    started = time.monotonic()
    polls = 0
    while True:
        found = subprocess.run(["pgrep", "-f", "ci-check"], capture_output=True, text=True)
        waited = time.monotonic() - started
        if not found.stdout.strip():
            if polls:
                print(f"CI ended after {waited:.0f} s of waiting", flush=True)
            return True
        if waited >= limit:
            return False
        polls += 1
        if polls == 1:
            print("CI is running (it uses Redis dbs 10-15): waiting, every 30 s ...", flush=True)
        time.sleep(30)


def arena_row(tree: Tree, visitors: int, warmup: float, seconds: float, direct_ms: float) -> dict:
    """bench/battles.py's level on ``tree`` (a fresh server), with the battle time's percentiles
    (its overhead's plus the direct stream time) and the server CPU per battle."""
    result, _ = measure_level(tree, visitors, warmup, seconds, direct_ms, None, None)
    result["server_cpu_ms"] = result["web_cpu_ms"] + result["worker_cpu_ms"]
    result["battle_p50"] = result["overhead_p50"] + direct_ms
    result["battle_p99"] = result["overhead_p99"] + direct_ms
    return result


# --- the report -------------------------------------------------------------------------------
def table(levels: list[int], arena: dict[int, dict], fastchat: dict[int, dict]) -> str:
    """Both rows of each level side by side (a part not run: nan)."""
    missing = {
        "battles_per_s": math.nan,
        "battle_p50": math.nan,
        "battle_p99": math.nan,
        "server_cpu_ms": math.nan,
        "client_cpu_ms": math.nan,
        "machine_load": math.nan,
        "errors": "-",
    }
    lines = [
        "| visitors | Arena battles/s | FastChat battles/s | Arena / FastChat "
        "| Arena battle p50/p99 ms | FastChat battle p50/p99 ms "
        "| server CPU ms/battle Arena / FastChat | client CPU ms/battle Arena / FastChat "
        "| errors Arena / FastChat | load (1 min) Arena / FastChat |",
        "|---:" * 10 + "|",
    ]
    for visitors in levels:
        a, f = arena.get(visitors, missing), fastchat.get(visitors, missing)
        ratio = a["battles_per_s"] / f["battles_per_s"] if f["battles_per_s"] else math.nan
        errors_f = sum(f["errors"].values()) if isinstance(f["errors"], dict) else f["errors"]
        lines.append(
            f"| {visitors} | {a['battles_per_s']:.1f} | {f['battles_per_s']:.1f} | {ratio:.2f}x "
            f"| {a['battle_p50']:.0f} / {a['battle_p99']:.0f} "
            f"| {f['battle_p50']:.0f} / {f['battle_p99']:.0f} "
            f"| {a['server_cpu_ms']:.1f} / {f['server_cpu_ms']:.1f} "
            f"| {a['client_cpu_ms']:.1f} / {f['client_cpu_ms']:.1f} "
            f"| {a['errors']} / {errors_f} "
            f"| {a['machine_load']:.1f} / {f['machine_load']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--levels", default="10,50", help="visitors per level")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per level")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--tokens", type=int, default=26, help="content chunks per answer")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument(
        "--concurrency-count",
        type=int,
        default=10,
        help="FastChat's --concurrency-count (gradio's limit per event handler; its default 10)",
    )
    parser.add_argument("--skip-arena", action="store_true", help="FastChat's part only")
    parser.add_argument(
        "--wait-ci", type=float, default=1800.0, help="seconds to wait for CI to end"
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    started = time.monotonic()
    python = fastchat_python()
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
    server = FastChatServer(python, upstream_url, args.concurrency_count)
    fastchat: dict[int, dict] = {}
    arena: dict[int, dict] = {}
    trees: list[Tree] = []
    direct_ms = math.nan
    try:
        import uvloop

        direct_ms = uvloop.run(direct_stream_ms(upstream_url))
        print(
            f"fake upstream: {args.tokens} chunks {args.delay} s apart; direct stream "
            f"(median of 7, idle) {direct_ms:.0f} ms; FastChat --concurrency-count "
            f"{args.concurrency_count}",
            flush=True,
        )
        arena_tree = None
        if not args.skip_arena:
            if wait_for_ci(args.wait_ci):
                arena_tree = open_trees(
                    trees,
                    argparse.Namespace(baseline=None, env=[]),
                    "arena_bench_fastchat",
                    ARENA_SETTINGS,
                )
                print(f"settings changed for Arena's bench: {ARENA_SETTINGS}", flush=True)
                arena_tree.prepare(live_models=LIVE_MODELS, upstream_url=upstream_url)
            else:
                print(f"CI still running after {args.wait_ci:g} s: Arena's part not run")
        # Alternating per level, so that both meet the same load on the machine.
        for visitors in levels:
            fastchat[visitors] = measure_fastchat(
                server, visitors, args.warmup, args.seconds, args.tokens
            )
            if arena_tree is not None:
                arena[visitors] = arena_row(
                    arena_tree, visitors, args.warmup, args.seconds, direct_ms
                )
    finally:
        close_trees(trees, False)
        server.stop()
        shutil.rmtree(server.tmp, ignore_errors=True)
        upstream.send_signal(signal.SIGTERM)
        upstream.wait(timeout=15)
    print()
    print(
        f"Whole live battles, closed loop, no think time, same run, same fake upstream "
        f"({args.tokens} chunks {args.delay} s apart, direct stream {direct_ms:.0f} ms); "
        f"window {args.seconds:g} s after {args.warmup:g} s warm-up, fresh server per level; "
        f"FastChat 0.2.36 (gradio 4.19.2, --concurrency-count {args.concurrency_count}) "
        f"against Arena's production shape (2 uvicorn workers + Celery); "
        f"{time.monotonic() - started:.0f} s in all."
    )
    print(table(levels, arena, fastchat))
    print(
        f"Battle: prompt sent -> both answers whole. Server CPU: Arena's uvicorn workers + "
        f"Celery worker; FastChat's one process. Machine load (1 min) at the end "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs."
    )


if __name__ == "__main__":
    main()
