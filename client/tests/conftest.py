"""The client's tests: the package from this checkout, and a scripted HTTP server on loopback.

``client/`` goes on ``sys.path`` so the tests read this checkout's ``arena_env`` whether or not
it is installed. ``scripted_server`` is a real HTTP server (``http.server``) on a loopback port
that answers each request with the next scripted answer and records what it received; the
live tests use the root conftest's ``asgi_server`` (the real application) instead.
"""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[1]
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))

from arena_env_test_server import ScriptedServer  # noqa: E402 (after the path is set)


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Celery tasks run in the process that queues them (the vote's request), whatever the
    settings chose at start-up (a REDIS_URL turns eager off)."""
    from config.celery_app import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before
