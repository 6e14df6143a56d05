"""bin/serve's bounds, on a free loopback port with production settings and two workers: a
request head sent slowly is cut off, uvicorn's own refusals answer in JSON under /api/, the
battle sockets of one address are capped across both workers (counted in Redis), and a frame
over the limit is closed with 1009 by uvicorn itself."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from conftest import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MAX_SOCKETS = 3


def _database_url() -> str:
    db = settings.DATABASES["default"]
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{db.get('USER') or 'postgres'}{password}@{host}:{port}/{db['NAME']}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PGPASSWORD")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DATABASE_URL=_database_url(),  # nothing here reaches the database
        REDIS_URL=settings.REDIS_URL,
        DJANGO_SECURE_SSL_REDIRECT="false",
        ARENA_PYTHON=str(BIN / "python"),
        ARENA_HOST="127.0.0.1",
        ARENA_PORT=str(port),
        ARENA_WEB_WORKERS="2",
        ARENA_HTTP_HEADER_TIMEOUT_SECONDS="1",
        ARENA_WS_MAX_PER_ADDRESS=str(MAX_SOCKETS),
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(ROOT / "bin" / "serve")],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while _raw(port, b"GET /api/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", quiet=True) == b"":
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.25)
        yield port
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        print(log.read_text(errors="replace")[-5000:])


def _raw(port: int, request: bytes, *, quiet: bool = False) -> bytes:
    """Send ``request`` on a new connection; everything the server sends until it closes."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(request)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            return received
    except OSError:
        if quiet:
            return b""
        raise


def _status_and_json(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    return int(head.split()[1]), json.loads(body)


def test_a_slowly_sent_request_head_is_cut_off(served):
    with socket.create_connection(("127.0.0.1", served), timeout=30) as sock:
        sock.sendall(b"GET /api/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
        received, closed = b"", False
        for _ in range(60):  # a byte a second, far longer than the head's deadline
            try:
                sock.sendall(b"a")
            except OSError:
                closed = True
                break
            try:
                sock.settimeout(1)
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
            received += chunk
            if not chunk:
                closed = True
                break
    assert closed
    assert received.startswith(b"HTTP/1.1 408")


def test_uvicorns_own_refusals_answer_in_json_under_the_api(served):
    control = b"GET /api/leaderboard HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\x01b\r\n\r\n"
    status, body = _status_and_json(_raw(served, control))
    assert status == 400 and body["error"]["code"] == "bad_request" and body["error"]["message"]
    long_url = b"GET /api/" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    status, body = _status_and_json(_raw(served, long_url))
    assert 400 <= status < 500 and body["error"]["code"] == "request_too_large"
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 4000) for i in range(100))
    big_head = b"GET /api/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n"
    status, body = _status_and_json(_raw(served, big_head))
    assert status == 431 and body["error"]["code"] == "request_too_large"


def _battle_socket(port: int, source: str = "127.0.0.1"):
    from websockets.sync.client import connect

    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    return connect(
        f"ws://127.0.0.1:{port}/ws/battle",
        sock=sock,
        origin=f"http://127.0.0.1:{port}",
        open_timeout=30,
        close_timeout=10,
    )


def test_the_sockets_of_one_address_are_capped_over_both_workers(served):
    from websockets.exceptions import ConnectionClosed

    with contextlib.ExitStack() as stack:
        for _ in range(MAX_SOCKETS):
            stack.enter_context(_battle_socket(served))
        refused = stack.enter_context(_battle_socket(served))
        frame = json.loads(refused.recv(timeout=30))
        assert frame["type"] == "error" and frame["code"] == "too_many_sockets"
        with pytest.raises(ConnectionClosed) as closed:
            refused.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4429
        other = stack.enter_context(_battle_socket(served, source="127.0.0.2"))  # elsewhere
        other.send(json.dumps({"type": "launch"}))
        assert json.loads(other.recv(timeout=30))["code"] == "invalid"


def test_a_frame_over_the_limit_is_closed_by_uvicorn_with_1009(served):
    from websockets.exceptions import ConnectionClosed

    with _battle_socket(served) as ws:
        ws.send(json.dumps({"type": "launch"}))
        assert json.loads(ws.recv(timeout=30))["code"] == "invalid"
        ws.send("x" * (settings.ARENA_WS_MAX_FRAME_BYTES + 1))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
