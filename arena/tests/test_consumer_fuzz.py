"""Random frames on the battle websocket: whatever arrives, the consumer answers in
frames of its vocabulary and never closes the socket or crashes; a frame that is not a command
gets an error frame.

Each example opens a socket through the project's ASGI application (origin check, session,
consumer), sends one random frame and then a ``suggest`` frame, and reads every frame up to the
suggestion: the socket was still answering after the random one.
"""

import asyncio
import json
import string
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from arena.live.turns import battle_start_live, battle_turn_finish
from arena.live.upstream import Answer, close_clients
from arena.services.terms import terms_accept
from arena.tests.fake_openai import FakeModel
from config.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True)]

COMMANDS = ("start", "turn", "regenerate", "stop", "models", "suggest")
BATTLE = "$battle-of-this-session$"
FRAME_TYPES = {"turn_start", "deltas", "side_end", "turn_end", "models", "suggestion", "error"}
FRAME_TIMEOUT = 10

# Text as JSON can carry it: any code point, lone surrogates and NUL included.
_chars = st.one_of(
    st.characters(exclude_categories=()),
    st.sampled_from(["\x00", "\ud800", "\udfff", "\ufffe", "\u202e"]),
    st.sampled_from(string.printable),
)
texts = st.text(_chars, max_size=40)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**300), max_value=10**300),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
frames_models = st.one_of(
    st.lists(st.sampled_from(["zephyrine-1", "zephyrine-2"]), max_size=3),
    st.lists(texts, max_size=3),
    values,
)
frames = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(COMMANDS), st.sampled_from(COMMANDS), texts, values)},
    optional={
        "prompt": st.one_of(texts, texts.filter(str.strip), values),
        # BATTLE stands for a battle of this session, ready for a follow-up when the test begins
        "battle_id": st.one_of(st.just(BATTLE), st.uuids().map(str), texts, values),
        "mode": st.one_of(st.sampled_from(["anonymous", "named"]), values),
        "models": frames_models,
    },
)


def _nested(depth: int, inside: str = "") -> str:
    return "[" * depth + inside + "]" * depth


# Well-formed commands with hostile values: most examples, so that many reach the services.
commands = st.fixed_dictionaries(
    {
        "type": st.sampled_from(COMMANDS),
        "prompt": st.one_of(st.text(min_size=1), texts).filter(str.strip),
        "battle_id": st.just(BATTLE),
    },
    optional={"mode": st.sampled_from(["anonymous", "named"]), "models": frames_models},
)
raw_frames = st.one_of(
    commands.map(json.dumps),
    commands.map(json.dumps),
    commands.map(json.dumps),
    frames.map(json.dumps),
    values.map(json.dumps),
    st.integers(min_value=1, max_value=5000).map(_nested),
    st.integers(min_value=1, max_value=5000).map(
        lambda n: '{"type": "start", "prompt": ' + _nested(n, '"x"') + "}"
    ),
    st.integers(min_value=4301, max_value=20000).map(lambda n: "9" * n),  # past int's digits
    st.sampled_from(["", "{", '{"type": ', "null", "NaN", '"\\ud800"', '{"type": "\\u0000"}']),
    texts,
    st.binary(max_size=40),
)


def _is_command(raw: str | bytes) -> bool:
    if isinstance(raw, bytes):
        return False
    try:
        content = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(content, dict) and content.get("type") in COMMANDS


async def _exchange(session_key: str, battle_id: str, raw: str | bytes) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        raw = raw.replace(BATTLE, battle_id)
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={session_key}".encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/battle", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    received = []
    try:
        # As the server hands a frame over (send_to refuses empty ones).
        kind = "bytes" if isinstance(raw, bytes) else "text"
        await comm.send_input({"type": "websocket.receive", kind: raw})
        await comm.send_json_to({"type": "suggest"})
        while True:
            # An exception of the consumer is raised here; a close arrives as a message.
            message = await comm.receive_output(FRAME_TIMEOUT)
            assert message["type"] == "websocket.send", f"socket closed: {message}"
            frame = json.loads(message["text"])
            assert frame["type"] in FRAME_TYPES, frame
            if frame["type"] == "error":
                assert isinstance(frame["code"], str) and isinstance(frame["message"], str)
                assert frame["code"] != "server_error", frame  # every input has its own error
            received.append(frame)
            if frame["type"] == "suggestion":
                return received
    finally:
        await comm.disconnect()
        await close_clients()


@pytest.fixture
def session_key(db) -> str:
    store = SessionStore()
    store["arena_voter_id"] = "fuzz-voter"
    store.create()
    terms_accept(voter_id="fuzz-voter")
    return str(store.session_key)


@pytest.fixture
def battle_id(session_key, live_models) -> str:
    """A live battle of the session, its first turn answered."""
    plan = battle_start_live(session_key=session_key, prompt="Hello")
    answers = {
        s: (p.message_id, Answer(parts=["Hi"], status="done")) for s, p in plan.sides.items()
    }
    battle_turn_finish(battle_id=plan.battle_id, answers=answers)
    return str(plan.battle_id)


@pytest.fixture
def quick_upstream(fake_upstream, live_models):
    fake_upstream.default = FakeModel(tokens=3)
    return fake_upstream


@hypothesis_settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=raw_frames)
def test_random_frames_get_frames_back_and_never_close_the_socket(
    quick_upstream, session_key, battle_id, raw
):
    received = asyncio.run(_exchange(session_key, battle_id, raw))
    event("answered with " + ", ".join(sorted({frame["type"] for frame in received[:-1]})))
    if not _is_command(raw):
        assert any(frame["type"] == "error" for frame in received[:-1]), (raw, received)
