"""The hostile probe's figures against the production shape (not a timed test).

    .venv/bin/python bench/hostile.py [--baseline REV] [--sockets 200] [--idle-seconds 130]
        [--slowloris 100] [--dead-webhooks 12] [--keep-logs] [--env NAME=VALUE ...]

Starts the production shape natively (bench/shape.py: ``config.settings.production``, the demo,
``bin/serve`` with two workers, the Celery workers of docker-compose.yml) and, with
``--baseline REV``, the same for a git worktree of REV in the same run, then measures what a
hostile probe of the site found:

1. **Sockets from one address**: ``--sockets`` websockets opened at once from 127.0.0.1 (with
   the site's own Origin), how many were accepted, and how many of the accepted ones are still
   open after ``--idle-seconds`` of sending nothing (130 by default: past the 120 s idle
   timeout; the probe looked at 60 s). The client reads, so it answers the server's pings.
2. **Frame size**: what a 15 MB and a 17 MB ``start`` frame get (an error frame's code, or the
   close code).
3. **Slowloris**: ``--slowloris`` HTTP connections that send a request's headers one line every
   5 s; how many the server has closed after ``--idle-seconds``.
4. **Dead webhooks**: ``--dead-webhooks`` environment runs whose webhook URL is a loopback
   listener that accepts and never answers (allow-listed in the new tree, which refuses
   loopback otherwise), each with one submission and the webhook sweep queued (as beat does
   every five minutes); once deliveries hang, one pool battle and vote, and the time
   from the vote to the leaderboard snapshot that counts it (RATINGS_REFRESH_DEBOUNCE_SECONDS=1,
   so the figure is the queue's wait plus the fit). The same with no dead webhook first.

The anchor is the probe's run on the tree before these defences (its figures are printed
beside each row): 200 of 200 sockets accepted, 100 of 100 idle ones open after 60 s, a 15 MB
frame parsed, 0 of 100 slowloris connections closed after 60 s, the refit 6.4 s later with 12
dead webhooks than without (67.4 s against about 61 s after its vote, at the default 60 s
debounce).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.shape import (  # noqa: E402
    USER_AGENT,
    Tree,
    add_tree_arguments,
    close_trees,
    open_trees,
)

BENCH_ENV = {
    # One load generator on 127.0.0.1 would trip what real visitors would not.
    "ARENA_RATELIMIT_ENABLE": "false",
    "ARENA_MIN_VOTE_SECONDS": "0",
    "ARENA_CHALLENGE": "false",
    "RATINGS_REFRESH_DEBOUNCE_SECONDS": "1",
    # The new tree refuses http and loopback webhooks unless the operator allows them.
    "ARENA_ENV_WEBHOOK_ALLOW_HTTP": "true",
    "ARENA_ENV_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
}
ANCHOR = {
    "sockets_accepted": "200 of 200",
    "idle_open": "100 of 100 after 60 s",
    "frame_15mb": "read and parsed",
    "frame_17mb": "1009",
    "slowloris_closed": "0 of 100 after 60 s",
    "refit_delay": "+6.4 s (67.4 s vs ~61 s)",
}


@dataclass
class Row:
    tree: str
    sockets: str = ""
    idle_open: str = ""
    frame_15mb: str = ""
    frame_17mb: str = ""
    slowloris_closed: str = ""
    refit_quiet_s: float = 0.0
    refit_dead_s: float = 0.0


async def _sockets(base: str, count: int, idle_seconds: float) -> tuple[int, int]:
    """(accepted, still open after idle_seconds) of ``count`` sockets opened at once."""
    import aiohttp

    # No pool limit: aiohttp's default of 100 connections would queue the rest behind them.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        headers={"User-Agent": USER_AGENT}, connector=connector
    ) as http:

        async def one() -> aiohttp.ClientWebSocketResponse | None:
            try:
                ws = await http.ws_connect(
                    base.replace("http", "ws", 1) + "/ws/battle",
                    headers={"Origin": base},
                    heartbeat=None,
                    autoping=True,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5),
                )
            except (aiohttp.ClientError, TimeoutError):
                return None
            # A socket refused after its handshake gets an error frame and a close at once; an
            # accepted one hears nothing until it sends.
            try:
                await ws.receive(timeout=1.0)
            except TimeoutError:
                return ws
            await ws.close()
            return None

        opened = await asyncio.gather(*(one() for _ in range(count)))
        accepted = [ws for ws in opened if ws is not None]

        async def watch(ws: aiohttp.ClientWebSocketResponse) -> None:
            # Reading answers the server's pings (aiohttp pongs inside receive), as a page
            # does; the loop ends when the server closes the socket.
            while True:
                try:
                    message = await ws.receive()
                except (aiohttp.ClientError, ConnectionError):
                    return
                if message.type in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSED,
                    aiohttp.WSMsgType.CLOSING,
                    aiohttp.WSMsgType.ERROR,
                ):
                    return

        watchers = [asyncio.create_task(watch(ws)) for ws in accepted]
        await asyncio.sleep(idle_seconds)
        open_after = sum(not w.done() for w in watchers)
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await asyncio.gather(*(ws.close() for ws in accepted), return_exceptions=True)
        return len(accepted), open_after


async def _frame(base: str, megabytes: int) -> str:
    """What a ``start`` frame of ``megabytes`` MB gets."""
    import aiohttp

    async with aiohttp.ClientSession(headers={"User-Agent": USER_AGENT}) as http:
        ws = await http.ws_connect(
            base.replace("http", "ws", 1) + "/ws/battle", headers={"Origin": base}
        )
        prompt = "x" * (megabytes * 1_000_000)
        try:
            await ws.send_str(json.dumps({"type": "start", "prompt": prompt}))
            message = await ws.receive(timeout=30)
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            # The server closed the socket while the frame was still being sent.
            return f"closed unread ({ws.close_code or type(exc).__name__})"
        finally:
            await ws.close()
        if message.type == aiohttp.WSMsgType.TEXT:
            frame = json.loads(message.data)
            return f"parsed: {frame.get('type')} {frame.get('code', '')}".strip()
        return f"closed unread ({ws.close_code})"


async def _slowloris(port: int, count: int, seconds: float) -> int:
    """How many of ``count`` connections sending headers a line every 5 s the server closed."""
    closed = 0

    async def one() -> bool:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return True
        try:
            writer.write(b"GET /about HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            await writer.drain()
            deadline = time.monotonic() + seconds
            n = 0
            while time.monotonic() < deadline:
                try:
                    data = await asyncio.wait_for(reader.read(1024), timeout=5)
                except TimeoutError:
                    data = None
                if data == b"":
                    return True  # the server closed it
                n += 1
                writer.write(f"X-Slow-{n}: 1\r\n".encode())
                await writer.drain()
            return False
        except (ConnectionError, OSError):
            return True
        finally:
            writer.close()

    results = await asyncio.gather(*(one() for _ in range(count)))
    closed = sum(results)
    return closed


class _Tarpit:
    """A loopback listener that accepts connections and never answers."""

    def __init__(self) -> None:
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.connections = 0

    async def start(self) -> None:
        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                while await reader.read(65536):
                    pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(hold, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]


async def _vote_to_snapshot(tree: Tree) -> float:
    """Seconds from an acknowledged pool vote to a leaderboard snapshot that counts it."""
    import aiohttp

    base = tree.shape.url
    before = int(
        tree.database.query("SELECT coalesce(max(id), 0) FROM ratings_leaderboardsnapshot")[0][0]
    )
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(
        base_url=base, cookie_jar=jar, headers={"User-Agent": USER_AGENT}
    ) as http:
        async with http.get("/") as response:
            await response.read()
        csrf = next((c.value for c in jar if c.key == "csrftoken"), "")
        headers = {"X-CSRFToken": csrf, "Content-Type": "application/json"}
        async with http.post("/api/terms", data='{"accept": true}', headers=headers) as r:
            await r.read()
        async with http.post("/api/battles", data="{}", headers=headers) as r:
            battle = json.loads(await r.read())
        async with http.post(
            f"/api/battles/{battle['id']}/vote", data='{"winner": "model_a"}', headers=headers
        ) as r:
            await r.read()
            if r.status != 201:
                raise RuntimeError(f"vote {r.status}")
        voted = time.monotonic()
    deadline = voted + 600
    while time.monotonic() < deadline:
        rows = tree.database.query(
            "SELECT count(*) FROM ratings_leaderboardsnapshot WHERE id > %s", before
        )
        if int(rows[0][0]):
            return time.monotonic() - voted
        tree.shape.check_alive("waiting for the refit")
        await asyncio.sleep(0.1)
    raise RuntimeError("no snapshot within 600 s of the vote")


def _env_token(tree: Tree) -> str:
    out = tree.shape.manage("api_token", "create", "--name", "bench", "--scope", "env")
    # The token is the output's last line.
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError("api_token create printed nothing")
    return lines[-1]


async def _dead_webhooks(tree: Tree, runs: int) -> float:
    """The vote-to-snapshot seconds while ``runs`` runs' webhooks hang on a tarpit."""
    import aiohttp

    tarpit = _Tarpit()
    await tarpit.start()
    token = _env_token(tree)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(base_url=tree.shape.url, headers=headers) as http:
        for i in range(runs):
            body = {"name": f"dead-{i}", "webhook_url": f"http://127.0.0.1:{tarpit.port}/hook"}
            async with http.post("/api/env/v1/runs", data=json.dumps(body)) as r:
                run = json.loads(await r.read())
                if r.status != 201:
                    raise RuntimeError(f"run {r.status}: {run}")
            submission = {
                "idempotency_key": f"k{i}",
                "prompt": "Say hello.",
                "completions": [{"text": "Hello."}, {"text": "Hi there."}],
            }
            async with http.post(
                f"/api/env/v1/runs/{run['id']}/submissions", data=json.dumps(submission)
            ) as r:
                await r.read()
                if r.status != 201:
                    raise RuntimeError(f"submission {r.status}")
    # The webhook sweep (beat's, every five minutes) queues a delivery for each run behind its
    # feed: queued here at once. The deliveries reach the tarpit and occupy whichever worker
    # processes take them.
    tree.shape.manage(
        "shell",
        "-c",
        "from celery import current_app; current_app.send_task('arena.tasks.env_webhook_sweep')",
    )
    deadline = time.monotonic() + 30
    while tarpit.connections < min(runs, 2) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    try:
        return await _vote_to_snapshot(tree)
    finally:
        assert tarpit.server is not None
        tarpit.server.close()


def _measure(tree: Tree, args: argparse.Namespace) -> Row:
    base = tree.shape.url
    row = Row(tree.label)
    row.refit_quiet_s = asyncio.run(_vote_to_snapshot(tree))
    print(f"{tree.label}: refit {row.refit_quiet_s:.1f} s after a vote, quiet", flush=True)

    async def sockets_and_slowloris() -> tuple[tuple[int, int], int]:
        sockets = asyncio.create_task(_sockets(base, args.sockets, args.idle_seconds))
        slow = asyncio.create_task(_slowloris(tree.shape.port, args.slowloris, args.idle_seconds))
        return await sockets, await slow

    (accepted, idle_open), slow_closed = asyncio.run(sockets_and_slowloris())
    row.sockets = f"{accepted} of {args.sockets}"
    row.idle_open = f"{idle_open} of {accepted} after {args.idle_seconds:.0f} s"
    row.slowloris_closed = f"{slow_closed} of {args.slowloris} after {args.idle_seconds:.0f} s"
    print(f"{tree.label}: sockets {row.sockets}, idle {row.idle_open}", flush=True)
    row.frame_15mb = asyncio.run(_frame(base, 15))
    row.frame_17mb = asyncio.run(_frame(base, 17))
    print(f"{tree.label}: 15 MB frame {row.frame_15mb}, 17 MB {row.frame_17mb}", flush=True)
    row.refit_dead_s = asyncio.run(_dead_webhooks(tree, args.dead_webhooks))
    print(
        f"{tree.label}: refit {row.refit_dead_s:.1f} s after a vote with "
        f"{args.dead_webhooks} dead webhooks",
        flush=True,
    )
    return row


def _table(rows: list[Row], dead: int) -> str:
    lines = [
        "| | " + " | ".join(r.tree for r in rows) + " | the probe's anchor |",
        "|---|" + "---|" * (len(rows) + 1),
    ]

    def line(label: str, values: list[str], anchor: str) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + f" | {anchor} |")

    line("sockets accepted from one address", [r.sockets for r in rows], ANCHOR["sockets_accepted"])
    line("idle sockets still open", [r.idle_open for r in rows], ANCHOR["idle_open"])
    line("15 MB frame", [r.frame_15mb for r in rows], ANCHOR["frame_15mb"])
    line("17 MB frame", [r.frame_17mb for r in rows], ANCHOR["frame_17mb"])
    line(
        "slowloris connections closed",
        [r.slowloris_closed for r in rows],
        ANCHOR["slowloris_closed"],
    )
    line(
        "vote -> snapshot, quiet",
        [f"{r.refit_quiet_s:.1f} s" for r in rows],
        "~61 s (60 s debounce)",
    )
    line(
        f"vote -> snapshot, {dead} dead webhooks",
        [f"{r.refit_dead_s:.1f} s" for r in rows],
        "67.4 s (60 s debounce)",
    )
    line(
        "delay the dead webhooks add",
        [f"{r.refit_dead_s - r.refit_quiet_s:+.1f} s" for r in rows],
        ANCHOR["refit_delay"],
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=130.0)
    parser.add_argument("--slowloris", type=int, default=100)
    parser.add_argument("--dead-webhooks", type=int, default=12)
    parser.add_argument("--keep-logs", action="store_true", help="print the process logs' paths")
    add_tree_arguments(parser)
    args = parser.parse_args()
    if args.baseline:
        Tree.resolve(args.baseline)  # a bad revision ends the run before anything starts
    settings = BENCH_ENV | dict(item.split("=", 1) for item in args.env)
    trees: list[Tree] = []
    rows: list[Row] = []
    try:
        current = open_trees(trees, args, "arena_bench_hostile", settings)
        for tree in trees:
            tree.prepare()
            tree.shape.start_web()
            tree.shape.start_worker()
        for tree in trees:
            rows.append(_measure(tree, args))
    finally:
        close_trees(trees, args.keep_logs)
    rows.sort(key=lambda r: r.tree != current.label)
    print()
    print(_table(rows, args.dead_webhooks))


if __name__ == "__main__":
    main()
