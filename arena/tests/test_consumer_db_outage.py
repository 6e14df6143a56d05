"""The database lost while two answers stream, on real PostgreSQL.

The outage is real: the test database stops accepting connections and the connections the
consumer's database threads hold are terminated (``pg_terminate_backend``), as a database
restart does; then it comes back.
"""

import psycopg
import pytest
from channels.db import database_sync_to_async
from django.db import connection
from psycopg import sql

from arena.models import Battle, BattleMessage
from arena.tests.fake_openai import FakeModel
from arena.tests.test_consumer_live import (
    FRAME_TIMEOUT,
    frames_until,
    get_battle,
    open_socket,
    serve,
    texts,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("upstream_clients"),
]


class DatabaseOutage:
    """Takes the test database away from every connection but the test's own, and back."""

    def __init__(self) -> None:
        params = connection.settings_dict
        self.name = params["NAME"]
        self.admin = psycopg.connect(
            host=params["HOST"] or "127.0.0.1",
            port=int(params["PORT"] or 5432),
            user=params["USER"],
            password=params["PASSWORD"] or None,
            dbname="postgres",
            autocommit=True,
        )
        # The test thread's own connection (flushed at teardown) is spared.
        own = connection.connection
        self.spared = own.info.backend_pid if own is not None else 0
        self.down = False

    def begin(self) -> None:
        self._allow(False)
        self.down = True
        self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND pid <> %s",
            [self.name, self.spared],
        )

    def end(self) -> None:
        if self.down:
            self._allow(True)
            self.down = False

    def close(self) -> None:
        self.end()
        self.admin.close()

    def _allow(self, allow: bool) -> None:
        statement = sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
            sql.Identifier(self.name), sql.SQL("true" if allow else "false")
        )
        self.admin.execute(statement)


@pytest.fixture
def outage():
    taken = DatabaseOutage()
    yield taken
    taken.close()


@pytest.fixture
def fast_saves(monkeypatch, settings):
    from arena.live import consumer, runtime

    settings.ARENA_LIVE_SAVE_SECONDS = 0.05  # partial saves happen before the outage
    monkeypatch.setattr(consumer, "_FINISH_RETRY_SECONDS", 0.01)
    return runtime  # the lost-turn retry's delays


async def stream_into_outage(comm, outage) -> list[dict]:
    """Start a battle, take the database away once both sides are streaming, and read the
    frames up to the ``turn_lost`` error."""
    await comm.send_json_to({"type": "start", "prompt": "Tell me a long story"})
    frames = []
    seen = {"a": 0, "b": 0}
    while min(seen.values()) < 3:
        frame = await comm.receive_json_from(FRAME_TIMEOUT)
        frames.append(frame)
        if frame["type"] == "deltas":
            for side in ("a", "b"):
                seen[side] += side in frame
    outage.begin()
    frames += await frames_until(comm, "error")
    return frames


async def turn_messages(battle_id, turn: int) -> list[BattleMessage]:
    return await database_sync_to_async(
        lambda: list(BattleMessage.objects.filter(battle_id=battle_id, turn=turn))
    )()


async def test_after_the_outage_the_full_answers_are_saved_and_regenerate_is_accepted_at_once(
    fake_upstream, live_models, outage, fast_saves, monkeypatch
):
    # The retry with back-off waits long here: the regenerate frame saves the turn itself.
    monkeypatch.setattr(fast_saves, "_SAVE_RETRY_FIRST_SECONDS", 60.0)
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=40, delay=0.02),
        m2=FakeModel(tokens=30, delay=0.02),
    )
    comm = await open_socket()
    frames = await stream_into_outage(comm, outage)
    battle_id = frames[0]["battle"]["id"]
    assert frames[-1]["code"] == "turn_lost" and "Regenerate" in frames[-1]["message"]
    ends = {f["side"]: f["status"] for f in frames if f["type"] == "side_end"}
    assert ends == {"a": "done", "b": "done"}  # the models answered in full meanwhile
    streamed = texts(frames)

    # While the database is still away, continuing says so and the socket stays usable.
    await comm.send_json_to({"type": "regenerate", "battle_id": battle_id})
    refused = await comm.receive_json_from(FRAME_TIMEOUT)
    assert refused["type"] == "error" and refused["code"] == "not_saved_yet"

    outage.end()
    await comm.send_json_to({"type": "regenerate", "battle_id": battle_id})
    start = await comm.receive_json_from(FRAME_TIMEOUT)
    assert start["type"] == "turn_start" and start["regenerated"] is True, start
    end = (await frames_until(comm, "turn_end"))[-1]
    assert end["battle"]["state"] == "ready"

    lost_turn = [m for m in await turn_messages(battle_id, 0) if m.superseded_at is not None]
    saved = {m.side: m for m in lost_turn}
    assert set(saved) == {"a", "b"}
    for side in ("a", "b"):
        assert saved[side].content == streamed[side]
        assert saved[side].status == BattleMessage.Status.DONE
    assert sorted(len(text.split()) for text in streamed.values()) == [30, 40]
    await comm.disconnect()


async def test_a_lost_turn_is_saved_by_the_retry_when_the_database_returns(
    fake_upstream, live_models, outage, fast_saves, monkeypatch
):
    monkeypatch.setattr(fast_saves, "_SAVE_RETRY_FIRST_SECONDS", 0.05)
    monkeypatch.setattr(fast_saves, "_SAVE_RETRY_MAX_SECONDS", 0.2)
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=25, delay=0.02),
        m2=FakeModel(tokens=35, delay=0.02),
    )
    comm = await open_socket()
    frames = await stream_into_outage(comm, outage)
    assert frames[-1]["code"] == "turn_lost"
    battle_id = frames[0]["battle"]["id"]
    streamed = texts(frames)
    outage.end()
    end = (await frames_until(comm, "turn_end"))[-1]["battle"]
    assert end["id"] == battle_id and end["state"] == "ready" and end["votable"] is True
    assert end["turns"][0]["a"]["content"] == streamed["a"]
    assert end["turns"][0]["b"]["content"] == streamed["b"]
    battle = await get_battle(battle_id)
    assert battle.state == Battle.State.READY
    saved = {m.side: m.content for m in await turn_messages(battle_id, 0)}
    assert saved == streamed
    await comm.disconnect()
