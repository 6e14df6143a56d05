"""Hostile input on the battle websocket and in JSON bodies: each gets an
error naming the field, the socket stays usable, nothing crashes the consumer."""

import json
import logging

import pytest

from arena.tests.fake_openai import FakeModel
from arena.tests.test_consumer_live import (
    FRAME_TIMEOUT,
    current_messages,
    frames_until,
    open_socket,
    serve,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("upstream_clients")]

DEEP = "[" * 1000 + "]" * 1000
DEEP_FRAME = '{"type": "start", "prompt": ' + DEEP + "}"


async def still_usable(comm) -> None:
    await comm.send_json_to({"type": "start", "prompt": "Still here?"})
    frames = await frames_until(comm, "turn_end")
    assert frames[-1]["battle"]["votable"] is True


async def test_a_frame_nested_a_thousand_deep_gets_an_error_frame(fake_upstream, live_models):
    comm = await open_socket()
    for text in (DEEP, DEEP_FRAME, "[" * 40_000):  # the last just under the frame size limit
        await comm.send_to(text_data=text)
        error = await comm.receive_json_from(FRAME_TIMEOUT)
        assert error["type"] == "error" and error["code"] == "invalid_json"
        assert error["field"] == "frame"
    # Deep enough to parse, too deep to take.
    await comm.send_to(text_data='{"type": "start", "prompt": ' + "[" * 30 + "]" * 30 + "}")
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error["field"] == "frame" and "nested" in error["message"]
    await still_usable(comm)
    await comm.disconnect()


async def test_a_deep_frame_while_streaming_leaves_the_turn_in_the_consumers_hands(
    fake_upstream, live_models
):
    fake_upstream.default = FakeModel(fault="endless", delay=0.01)
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Go on for ever"})
    await frames_until(comm, "deltas")
    await comm.send_to(text_data=DEEP_FRAME)
    frames = await frames_until(comm, "error")
    assert frames[-1]["field"] == "frame"
    # The turn still belongs to this socket: stop ends both upstream calls.
    await comm.send_json_to({"type": "stop"})
    end = (await frames_until(comm, "turn_end"))[-1]
    assert end["battle"]["state"] == "aborted"
    for model in live_models:
        closed = fake_upstream.wait_closed(model.upstream_model_id)
        assert closed.disconnected and not closed.completed
    await comm.disconnect()


@pytest.mark.parametrize(
    ("prompt", "problem"),
    [("a\x00b", "NUL"), ("\ud800", "surrogate"), ("ok \udfff ok", "surrogate")],
)
async def test_a_prompt_with_a_nul_or_a_lone_surrogate_gets_an_error_frame_naming_it(
    fake_upstream, live_models, prompt, problem
):
    comm = await open_socket()
    # As a browser sends it: JSON escapes (\u0000, \ud800) in valid UTF-8 text.
    await comm.send_to(text_data=json.dumps({"type": "start", "prompt": prompt}))
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error["type"] == "error" and error["field"] == "prompt" and problem in error["message"]
    await comm.send_json_to({"type": "start", "prompt": "A fine one"})
    frames = await frames_until(comm, "turn_end")
    battle_id = frames[-1]["battle"]["id"]
    await comm.send_to(
        text_data=json.dumps({"type": "turn", "battle_id": battle_id, "prompt": prompt})
    )
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error["type"] == "error" and error["field"] == "prompt"
    await comm.send_json_to({"type": "turn", "battle_id": battle_id, "prompt": "And then?"})
    assert (await frames_until(comm, "turn_end"))[-1]["battle"]["votable"] is True
    await comm.disconnect()


async def test_model_names_and_battle_ids_with_a_nul_or_a_surrogate_get_error_frames(
    fake_upstream, live_models
):
    comm = await open_socket()
    slugs = [live_models[0].slug, "zephyrine\x00"]
    frame = {"type": "start", "prompt": "Hi", "mode": "named", "models": slugs}
    await comm.send_to(text_data=json.dumps(frame))
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error["type"] == "error" and error["field"] == "models.1"
    for battle_id in ("\x00", "\ud800"):
        await comm.send_to(text_data=json.dumps({"type": "regenerate", "battle_id": battle_id}))
        error = await comm.receive_json_from(FRAME_TIMEOUT)
        assert error["code"] == "invalid" and error["field"] == "battle_id"
    for battle_id in (10**300, {"id": 1}):
        await comm.send_to(text_data=json.dumps({"type": "regenerate", "battle_id": battle_id}))
        error = await comm.receive_json_from(FRAME_TIMEOUT)
        assert error["type"] == "error" and error["code"] == "not_found"
    await comm.send_to(text_data=json.dumps({"type": "\ud800" * 1000}))
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error["field"] == "type" and len(error["message"]) < 100
    await still_usable(comm)
    await comm.disconnect()


async def test_an_unexpected_exception_is_logged_and_answered_with_a_generic_error_frame(
    fake_upstream, live_models, monkeypatch, caplog
):
    from arena.live import consumer, websocket

    def broken():
        raise RuntimeError("a bug, with internals: /srv/secret")

    monkeypatch.setattr(consumer, "live_models_public", broken)
    comm = await open_socket()
    with caplog.at_level(logging.ERROR, logger="arena.live.consumer"):
        await comm.send_json_to({"type": "models"})
        error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error == websocket.server_error_frame() and "secret" not in json.dumps(error)
    logged = [r for r in caplog.records if r.exc_info and "a bug" in str(r.exc_info[1])]
    assert logged, "the exception is logged with its traceback"
    await still_usable(comm)
    await comm.disconnect()


async def test_an_upstream_sending_nul_or_surrogates_is_saved_not_lost(fake_upstream, live_models):
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=["nul\x00 ", "lone\ud800 ", "end"]),
        m2=FakeModel(tokens=["fine"]),
    )
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Hi"})
    end = (await frames_until(comm, "turn_end"))[-1]["battle"]
    assert end["state"] == "ready"
    contents = {m.content for m in (await current_messages(end["id"])).values()}
    assert contents == {"nul\ufffd lone\ufffd end", "fine"}
    await comm.disconnect()
