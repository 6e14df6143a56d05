"""The battle socket's bounds: sockets per address (counted in the Redis cache every worker
shares), the idle timeout, the frame size limit."""

import json

import pytest
from channels.testing import WebsocketCommunicator
from django.core.cache import caches

from arena.cache import FallbackRedisCache
from arena.live import websocket
from arena.tests.test_consumer_live import FRAME_TIMEOUT, frames_until, open_socket
from config.asgi import application

pytestmark = [
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("upstream_clients"),
]

HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]


async def socket_from(address: str) -> tuple[WebsocketCommunicator, dict]:
    """A socket from this client address, and the first thing the server sent it (its accept)."""
    comm = WebsocketCommunicator(application, "/ws/battle", headers=HEADERS)
    comm.scope["client"] = (address, 40000)
    await comm.send_input({"type": "websocket.connect"})
    return comm, await comm.receive_output(FRAME_TIMEOUT)


async def test_the_socket_past_the_cap_of_one_address_is_told_and_closed_another_address_is_not(
    settings,
):
    assert isinstance(caches["default"], FallbackRedisCache)  # counted where every worker sees
    settings.ARENA_WS_MAX_PER_ADDRESS = 3
    held = []
    for _ in range(3):
        comm, accept = await socket_from("203.0.113.7")
        assert accept["type"] == "websocket.accept"
        held.append(comm)
    refused, accept = await socket_from("203.0.113.7")
    assert accept["type"] == "websocket.accept"  # accepted only to say why
    assert await refused.receive_json_from(FRAME_TIMEOUT) == websocket.too_many_sockets_frame()
    closed = await refused.receive_output(FRAME_TIMEOUT)
    assert closed == {"type": "websocket.close", "code": websocket.CLOSE_TOO_MANY_SOCKETS}
    await refused.send_input({"type": "websocket.disconnect", "code": closed["code"]})
    await refused.wait(FRAME_TIMEOUT)

    other, accept = await socket_from("198.51.100.4")
    assert accept["type"] == "websocket.accept"
    await other.send_json_to({"type": "stop"})  # open and served
    await other.disconnect()

    # A socket that closes frees its place.
    await held.pop().disconnect()
    again, accept = await socket_from("203.0.113.7")
    assert accept["type"] == "websocket.accept"
    await again.send_json_to({"type": "launch"})
    assert (await again.receive_json_from(FRAME_TIMEOUT))["code"] == "invalid"
    for comm in [*held, again]:
        await comm.disconnect()


async def test_a_socket_with_no_frame_and_nothing_streaming_is_closed_as_idle(settings):
    settings.ARENA_WS_IDLE_SECONDS = 0.2
    comm = await open_socket()
    closed = await comm.receive_output(FRAME_TIMEOUT)
    assert closed == {"type": "websocket.close", "code": websocket.CLOSE_IDLE}
    await comm.send_input({"type": "websocket.disconnect", "code": closed["code"]})
    await comm.wait(FRAME_TIMEOUT)


async def test_a_socket_streaming_a_turn_is_not_idle(settings, fake_upstream, live_models):
    from arena.tests.fake_openai import FakeModel

    settings.ARENA_WS_IDLE_SECONDS = 0.2
    fake_upstream.default = FakeModel(tokens=30, delay=0.03)  # streams for longer than that
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Take your time"})
    frames = await frames_until(comm, "turn_end")
    assert frames[-1]["battle"]["votable"] is True
    closed = await comm.receive_output(FRAME_TIMEOUT)  # idle from the turn's end on
    assert closed == {"type": "websocket.close", "code": websocket.CLOSE_IDLE}
    await comm.send_input({"type": "websocket.disconnect", "code": closed["code"]})
    await comm.wait(FRAME_TIMEOUT)


async def test_a_frame_over_the_limit_is_refused_unparsed_and_the_largest_legitimate_is_read(
    settings, monkeypatch, fake_upstream, live_models
):
    parsed = []
    real_parse = websocket.json_parse
    monkeypatch.setattr(
        websocket,
        "json_parse",
        lambda text, **kw: parsed.append(len(text)) or real_parse(text, **kw),
    )
    # The longest prompt allowed, every character as long as JSON makes one (\u0001, 6 bytes),
    # in a start frame naming two models: the largest frame the page may send.
    prompt = "\x01" * settings.ARENA_LIVE_MAX_PROMPT_CHARS
    models = ["m" * 100, "n" * 100]
    largest = json.dumps({"type": "start", "prompt": prompt, "mode": "named", "models": models})
    assert len(largest.encode()) <= settings.ARENA_WS_MAX_FRAME_BYTES
    comm = await open_socket()
    await comm.send_to(text_data=largest)
    answer = await comm.receive_json_from(FRAME_TIMEOUT)
    assert answer["code"] != "request_too_large" and parsed == [len(largest)]

    too_big = json.dumps({"type": "start", "prompt": "é" * settings.ARENA_WS_MAX_FRAME_BYTES})
    await comm.send_to(text_data=too_big)
    refused = await comm.receive_json_from(FRAME_TIMEOUT)
    assert refused["code"] == "request_too_large" and refused["field"] == "frame"
    closed = await comm.receive_output(FRAME_TIMEOUT)
    assert closed == {"type": "websocket.close", "code": websocket.CLOSE_TOO_BIG}
    assert parsed == [len(largest)]  # the large one was never parsed
    await comm.send_input({"type": "websocket.disconnect", "code": closed["code"]})
    await comm.wait(FRAME_TIMEOUT)
