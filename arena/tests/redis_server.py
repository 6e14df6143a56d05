"""A Redis server of a test's own, on a free loopback port, that the test may stop and restart.

Never the shared Redis: outages are made by killing this one.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import redis

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.mkdtemp(prefix="arena-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=1)

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(  # noqa: S603
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client().ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def keys(self, pattern: str) -> list[bytes]:
        return list(self.client().scan_iter(match=pattern))


@pytest.fixture
def own_redis():
    """A running redis-server on a free port, killed at the end."""
    if REDIS_SERVER is None:
        reason = "needs redis-server on PATH (apt-get install redis-server)"
        if os.environ.get("ARENA_REQUIRE_SERVICES") == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
