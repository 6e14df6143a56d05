"""A small TCP load balancer in front of several web nodes (stdlib only): tests/multihost.py's.

    python tests/tcp_proxy.py --listen 10.213.7.31:8000 --backend 10.213.7.11:8000 \\
        --backend 10.213.7.12:8000

Each accepted connection goes to the next backend in turn (round robin per connection) and is
then piped both ways, byte for byte, until either side closes: HTTP keep-alive connections and
websockets (an HTTP upgrade, then frames on the same connection) pass untouched. A backend that
refuses the connection (its server stopped) or does not answer within ``--connect-timeout`` is
skipped for the next one, so a stopped node costs only the connections it held open.

Nothing is sticky, and nothing needs to be: the arena keeps no state in a web process. A
session is a row in PostgreSQL (``cached_db``, its copy in the shared Redis cache), a battle is
authenticated to the session, votes and rate-limit counters are in PostgreSQL and Redis, and a
live battle's websocket streams from the process that accepted it for as long as that one TCP
connection lasts (a connection is never split between backends here). Being TCP-level, the
proxy adds no ``X-Forwarded-For``: the web nodes see the proxy's address as every client's. A
real deployment's HTTP proxy (nginx, an ingress) sets it, and ``ARENA_FORWARDED_ALLOW_IPS``
names that proxy (docs/deployment.md).

Each connection's backend is printed with its first request line (``conn <n> -> host:port GET
/ws/battle HTTP/1.1``), and each refusal, so a test reads from the log which node holds what.
The backend is picked when the client's first bytes arrive (HTTP's client speaks first), so a
browser's speculative connection that is never used pins no node.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


class Proxy:
    def __init__(self, backends: list[tuple[str, int]], connect_timeout: float) -> None:
        self.backends = backends
        self.connect_timeout = connect_timeout
        self.turn = itertools.count()
        self.numbers = itertools.count(1)

    async def _connect(
        self, number: int, request_line: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        first = next(self.turn)
        for offset in range(len(self.backends)):
            host, port = self.backends[(first + offset) % len(self.backends)]
            try:
                streams = await asyncio.wait_for(
                    asyncio.open_connection(host, port), self.connect_timeout
                )
            except (OSError, TimeoutError) as exc:
                print(f"conn {number} refused by {host}:{port}: {exc!r}", flush=True)
                continue
            print(f"conn {number} -> {host}:{port} {request_line}", flush=True)
            return streams
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = next(self.numbers)
        # HTTP's client speaks first: the backend is chosen when the first request arrives (a
        # browser's speculative, still idle connection pins none), and its line is logged.
        try:
            first = await reader.read(65536)
        except OSError:
            first = b""
        if not first:
            writer.close()
            return
        request_line = first.split(b"\r\n", 1)[0][:120].decode(errors="replace")
        backend = await self._connect(number, request_line)
        if backend is None:
            print(f"conn {number}: no backend accepts it", flush=True)
            writer.close()
            return
        upstream_reader, upstream_writer = backend
        upstream_writer.write(first)
        await asyncio.gather(
            _pipe(reader, upstream_writer), _pipe(upstream_reader, writer), return_exceptions=True
        )
        for stream in (writer, upstream_writer):
            stream.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then half-close the other side (or close it on an error)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()


async def main(args: argparse.Namespace) -> None:
    proxy = Proxy([_address(b) for b in args.backend], args.connect_timeout)
    host, port = _address(args.listen)
    server = await asyncio.start_server(proxy.handle, host, port, backlog=4096)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"proxy listening on {host}:{port} for {', '.join(args.backend)}", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--backend", action="append", required=True, metavar="HOST:PORT")
    parser.add_argument("--connect-timeout", type=float, default=3.0)
    asyncio.run(main(parser.parse_args(sys.argv[1:])))
