"""X-Forwarded-For is believed only from the proxies in ARENA_FORWARDED_ALLOW_IPS:
``bin/serve`` runs as a subprocess and a loopback client sends a different forwarded
address with every request.

By default nobody is trusted, so the rate limit keys on the connection's real address and the
client's fourth battle is refused whatever it claims; with ARENA_FORWARDED_ALLOW_IPS=127.0.0.1
the loopback client is the proxy and each forwarded address has a bucket of its own.
"""

import http.cookiejar
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from arena.tests.factories import pool_of
from conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 3  # battles per client address in the server's window (ARENA_RATELIMIT_BATTLES below)


def database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    user, host, port = db.get("USER") or "postgres", db.get("HOST") or "127.0.0.1", db.get("PORT")
    return f"postgres://{user}{password}@{host}:{port or 5432}/{db['NAME']}"


class Server:
    def __init__(self, forwarded_allow_ips: str | None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "ARENA_", "REDIS_", "CELERY_"))
        }
        env |= {
            "ARENA_PYTHON": sys.executable,
            "ARENA_HOST": "127.0.0.1",
            "ARENA_PORT": str(self.port),
            "ARENA_WEB_WORKERS": "1",
            "DJANGO_SETTINGS_MODULE": "config.settings.local",
            "DJANGO_DEBUG": "false",
            "DATABASE_URL": database_url(),
            # The server runs in its own process, where the test cannot stop its clock, and
            # django-ratelimit ends each address's window at its own second of the period: a
            # day's window can end during the test. A ten-year window makes that (seconds out of
            # 3650 days) as good as never.
            "ARENA_RATELIMIT_BATTLES": f"{LIMIT}/3650d",
            "ARENA_MIN_VOTE_SECONDS": "0",
        }
        if forwarded_allow_ips is not None:
            env["ARENA_FORWARDED_ALLOW_IPS"] = forwarded_allow_ips
        self.process = subprocess.Popen(  # noqa: S603
            [str(ROOT / "bin" / "serve")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        self.jar = jar
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.request("GET", "/") == 200:  # also sets the session and CSRF cookies
                    return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                output = self.process.stdout.read().decode() if self.process.stdout else ""
                pytest.fail(f"bin/serve did not start:\n{output}", pytrace=False)
            time.sleep(0.2)

    def request(self, method: str, path: str, forwarded_for: str | None = None) -> int:
        headers = {"Content-Type": "application/json"}
        csrf = next((c.value for c in self.jar if c.name == "csrftoken"), None)
        if csrf:
            headers["X-CSRFToken"] = csrf
        if forwarded_for:
            headers["X-Forwarded-For"] = forwarded_for
        data = b"{}" if method == "POST" else None
        request = urllib.request.Request(self.url + path, data, headers, method=method)  # noqa: S310
        try:
            with self.opener.open(request, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture
def serve(transactional_db) -> Iterator[type[Server]]:
    pool_of(n_models=4, n_prompts=8)
    servers: list[Server] = []

    def start(forwarded_allow_ips: str | None = None) -> Server:
        server = Server(forwarded_allow_ips)
        servers.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in servers:
        server.stop()


def battles(server: Server, forwarded: list[str]) -> list[int]:
    return [server.request("POST", "/api/battles", forwarded_for=f) for f in forwarded]


def test_by_default_forwarded_addresses_are_ignored_and_the_limit_keys_on_the_peer(serve):
    server = serve()
    claimed = [f"198.51.100.{n}" for n in range(1, LIMIT + 3)]
    assert battles(server, claimed) == [201] * LIMIT + [429, 429]


def test_from_a_configured_proxy_the_forwarded_address_is_the_client(serve):
    server = serve("127.0.0.1")
    # Each forwarded address is a client of its own, with a bucket of its own ...
    claimed = [f"198.51.100.{n}" for n in range(1, LIMIT + 3)]
    assert battles(server, claimed) == [201] * (LIMIT + 2)
    # ... and one forwarded address is limited like any client.
    assert battles(server, ["203.0.113.5"] * (LIMIT + 1)) == [201] * LIMIT + [429]
