"""What a live battle costs the database and the cache, pinned so that a regression fails: the
queries of a start and of a turn's end, the consumer's database threads keeping their
connections, and one cache object (one Redis pool) for every task and thread of a server."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.db import connection
from django.db.backends import utils as db_utils

from arena.live.runtime import db
from arena.tests.fake_openai import FakeModel
from arena.tests.test_consumer_live import frames_until, open_socket, serve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("upstream_clients")]

# A start, once the process keeps the live models and limits (arena.pool_cache): the session's
# lock and its streaming count, then the prompt, the battle and both messages (one INSERT).
START_QUERIES = 5
# The first start after a change also reads the limits and the draw's models.
FIRST_START_QUERIES = START_QUERIES + 2
# A turn's end: the locked battle with its models, the current messages, both answers (one
# statement run for each, executemany: counted once here, twice in the server's log), the
# battle's state (the page's payload is built from what was saved, not read back).
FINISH_QUERIES = 4


@pytest.fixture
def statements(monkeypatch) -> list[str]:
    """Every SQL statement run from now on, in any thread (the consumer's database pool)."""
    seen: list[str] = []
    run = db_utils.CursorWrapper._execute_with_wrappers

    def counted(self, sql, params, many, executor):
        seen.append(sql)
        return run(self, sql, params, many, executor)

    monkeypatch.setattr(db_utils.CursorWrapper, "_execute_with_wrappers", counted)
    return seen


# The counts are PostgreSQL's (production's): SQLite's backend adds a BEGIN statement to each
# transaction and PostgreSQL a lock read to the start, so the two do not count alike.
@pytest.mark.postgres
async def test_a_live_battle_starts_and_ends_in_a_fixed_number_of_queries(
    fake_upstream, live_models, statements
):
    words = [f"word{i} " for i in range(27)]
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=words, delay=0.001),
        m2=FakeModel(tokens=words, delay=0.001),
    )
    comm = await open_socket()
    starts = []
    for _ in range(2):
        before = len(statements)
        await comm.send_json_to({"type": "start", "prompt": "Say something"})
        await frames_until(comm, "turn_start")
        started = len(statements)
        frames = await frames_until(comm, "turn_end")
        ended = len(statements)
        assert frames[-1]["battle"]["state"] == "ready"
        assert ended - started == FINISH_QUERIES, statements[started:ended]
        starts.append(statements[before:started])
    await comm.disconnect()
    assert len(starts[0]) == FIRST_START_QUERIES, starts[0]
    assert len(starts[1]) == START_QUERIES, starts[1]


@pytest.mark.postgres
async def test_the_database_threads_keep_their_connections_between_calls():
    assert connection.settings_dict["CONN_MAX_AGE"] == 0  # production's default, and the tests'

    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    pids = {await db(backend_pid)() for _ in range(8)}
    # Two threads, one connection each (closed after every call, eight calls made eight).
    assert 1 <= len(pids) <= 2


SHARED_CACHE = textwrap.dedent(
    """
    import asyncio
    import config.asgi  # as a server imports it, before its tasks exist
    from django.core.cache import caches
    from arena.live.runtime import db

    def in_thread():
        return id(caches["default"])

    async def task():
        return id(caches["default"]), await db(in_thread)()

    async def main():
        seen = await asyncio.gather(*(asyncio.create_task(task()) for _ in range(3)))
        print(len({ident for pair in seen for ident in pair}))

    asyncio.run(main())
    """
)


def test_every_task_and_database_thread_of_a_server_finds_one_cache_object():
    # In a process of its own: the test's own context holds a cache object already.
    result = subprocess.run(
        [sys.executable, "-c", SHARED_CACHE],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "1"
