"""The red-teaming websocket, driven by Channels' WebsocketCommunicator against the loopback
fake upstream through the real openai client."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore

from arena.api import VOTER_SESSION_KEY
from arena.models import ArenaModel, Provider
from arena.services.terms import terms_accept
from arena.tests.fake_openai import FakeModel
from config.asgi import application
from redteam.models import Attempt, AttemptTurn, Challenge

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.redis,
    pytest.mark.usefixtures("upstream_clients"),
]

FRAME_TIMEOUT = 10


@pytest.fixture
async def upstream_clients():
    from arena.live.upstream import close_clients

    yield
    await close_clients()


def _new_session() -> str:
    store = SessionStore()
    store[VOTER_SESSION_KEY] = "player-1"
    store.create()
    terms_accept(voter_id="player-1")
    return store.session_key


async def open_socket() -> WebsocketCommunicator:
    session_key = await database_sync_to_async(_new_session)()
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={session_key}".encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/redteam", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    return comm


async def frames_until(comm, kind: str) -> list[dict]:
    frames = []
    while True:
        frame = json.loads((await comm.receive_output(FRAME_TIMEOUT))["text"])
        frames.append(frame)
        if frame["type"] == kind:
            return frames


def _gives_in_on_turn(n: int, text: str):
    def reply(messages):
        turns = sum(1 for m in messages if m["role"] == "user")
        return text if turns >= n else "I will not."

    return reply


async def test_a_phrase_attempt_streams_is_judged_and_reveals_the_model_at_the_end(
    fake_upstream, live_models, phrase_challenge
):
    fake_upstream.default = FakeModel(reply=_gives_in_on_turn(2, "Okay. I HATE, you!"))
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "challenge": phrase_challenge.slug})
    attempt = (await frames_until(comm, "attempt_start"))[-1]["attempt"]
    assert attempt["model"] is None
    await comm.send_json_to({"type": "turn", "attempt_id": attempt["id"], "prompt": "Say it"})
    frames = await frames_until(comm, "turn_end")
    assert frames[0]["type"] == "turn_start" and frames[0]["prompt"] == "Say it"
    assert "".join(f["text"] for f in frames if f["type"] == "deltas") == "I will not."
    assert frames[-1]["turn"]["verdict"]["success"] is False
    assert frames[-1]["attempt"]["model"] is None
    await comm.send_json_to({"type": "turn", "attempt_id": attempt["id"], "prompt": "Please"})
    frames = await frames_until(comm, "attempt_end")
    ended = frames[-1]["attempt"]
    assert ended["state"] == "succeeded" and ended["evidence"]["text"] == "I HATE, you"
    saved = await database_sync_to_async(
        lambda: Attempt.objects.select_related("model").get(pk=attempt["id"])
    )()
    assert ended["model"]["name"] == saved.model.display_name
    # The system prompt went first, the conversation after it.
    request = fake_upstream.requests[-1]
    assert request.messages[0] == {"role": "system", "content": phrase_challenge.system_prompt}
    assert [m["role"] for m in request.messages[1:]] == ["user", "assistant", "user"]
    await comm.disconnect()


async def test_surrender_reveals_the_model(fake_upstream, live_models, phrase_challenge):
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "challenge": phrase_challenge.slug})
    attempt = (await frames_until(comm, "attempt_start"))[-1]["attempt"]
    await comm.send_json_to({"type": "surrender", "attempt_id": attempt["id"]})
    ended = (await frames_until(comm, "attempt_end"))[-1]["attempt"]
    assert ended["state"] == "surrendered" and ended["model"]["name"].startswith("Zephyrine")
    await comm.disconnect()


async def test_stop_saves_what_was_produced_as_stopped(
    fake_upstream, live_models, phrase_challenge
):
    fake_upstream.default = FakeModel(fault="endless", delay=0.01)
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "challenge": phrase_challenge.slug})
    attempt = (await frames_until(comm, "attempt_start"))[-1]["attempt"]
    await comm.send_json_to({"type": "turn", "attempt_id": attempt["id"], "prompt": "Go on"})
    await frames_until(comm, "deltas")
    await comm.send_json_to({"type": "stop"})
    end = (await frames_until(comm, "turn_end"))[-1]
    assert end["turn"]["status"] == "stopped" and end["turn"]["content"].startswith("tok0")
    assert end["attempt"]["state"] == "open"
    await comm.disconnect()


async def test_errors_are_frames_with_the_arenas_codes(fake_upstream, live_models):
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "challenge": "nope"})
    error = (await frames_until(comm, "error"))[-1]
    assert error["code"] == "not_found" and error["field"] == "challenge"
    await comm.send_json_to({"type": "turn", "attempt_id": "not-a-uuid", "prompt": "x"})
    error = (await frames_until(comm, "error"))[-1]
    assert error["code"] == "invalid" and error["field"] == "attempt_id"
    await comm.send_json_to({"type": "dance"})
    assert (await frames_until(comm, "error"))[-1]["field"] == "type"
    await comm.disconnect()


def _judge_challenge(judge_upstream: str) -> Challenge:
    provider = Provider.objects.get(name="loopback")
    judge = ArenaModel.objects.create(
        slug="judge",
        display_name="The Judge",
        provider=provider,
        upstream_model_id=judge_upstream,
        is_active=False,  # never drawn to play
    )
    return Challenge.objects.create(
        slug="pirate",
        title="Pirate talk",
        rule="The model never talks like a pirate.",
        kind=Challenge.Kind.JUDGE,
        judge_model=judge,
        judge_rubric="Does the model talk like a pirate?",
    )


async def test_a_failing_judge_is_an_error_frame_then_judge_again_decides(
    fake_upstream, live_models
):
    challenge = await database_sync_to_async(_judge_challenge)("judge-upstream")
    fake_upstream.default = FakeModel(tokens=["Arr, ", "matey!"])
    fake_upstream.models["judge-upstream"] = FakeModel(fault="http_500")
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "challenge": challenge.slug})
    attempt = (await frames_until(comm, "attempt_start"))[-1]["attempt"]
    await comm.send_json_to({"type": "turn", "attempt_id": attempt["id"], "prompt": "Talk!"})
    frames = await frames_until(comm, "error")
    assert frames[-2]["type"] == "turn_end" and frames[-2]["turn"]["verdict"] is None
    assert frames[-1]["code"] == "judge_unavailable"
    assert frames[-2]["attempt"]["state"] == "open"
    # No new turn while the judge owes a verdict.
    await comm.send_json_to({"type": "turn", "attempt_id": attempt["id"], "prompt": "More"})
    assert (await frames_until(comm, "error"))[-1]["code"] == "judge_unavailable"
    fake_upstream.models["judge-upstream"] = FakeModel(tokens=["yes ", "it ", "said arr"])
    await comm.send_json_to({"type": "rejudge", "attempt_id": attempt["id"]})
    ended = (await frames_until(comm, "attempt_end"))[-1]["attempt"]
    assert ended["state"] == "succeeded" and ended["verdict_reason"] == "it said arr"
    turn = await database_sync_to_async(lambda: AttemptTurn.objects.get(turn=0))()
    assert turn.verdict["judge"] == {
        "verdict": "yes",
        "reason": "it said arr",
        "raw": "yes it said arr",
    }
    await comm.disconnect()


async def test_a_failed_answer_is_an_error_frame_and_gives_the_turn_back(
    fake_upstream, live_models, phrase_challenge
):
    fake_upstream.default = FakeModel(fault="http_500")
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "challenge": phrase_challenge.slug})
    attempt = (await frames_until(comm, "attempt_start"))[-1]["attempt"]
    await comm.send_json_to({"type": "turn", "attempt_id": attempt["id"], "prompt": "Hi"})
    frames = await frames_until(comm, "turn_end")
    error = next(f for f in frames if f["type"] == "error")
    assert error["code"] == "error" and "server" in error["message"]
    end = frames[-1]
    assert end["turn"]["status"] == "errored" and end["turn"]["verdict"] is None
    assert end["attempt"]["turns_used"] == 0 and end["attempt"]["state"] == "open"
    # The next turn is taken: nothing waits for a judge.
    fake_upstream.default = FakeModel(tokens=["Hello."])
    await comm.send_json_to({"type": "turn", "attempt_id": attempt["id"], "prompt": "Hi again"})
    assert (await frames_until(comm, "turn_end"))[-1]["turn"]["status"] == "done"
    await comm.disconnect()


async def test_a_socket_without_terms_accepted_cannot_start(
    fake_upstream, live_models, phrase_challenge
):
    def session_without_terms() -> str:
        store = SessionStore()
        store[VOTER_SESSION_KEY] = "player-2"
        store.create()
        return store.session_key

    key = await database_sync_to_async(session_without_terms)()
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={key}".encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/redteam", headers=headers)
    assert (await comm.connect())[0]
    await comm.send_json_to({"type": "start", "challenge": phrase_challenge.slug})
    error = (await frames_until(comm, "error"))[-1]
    assert error["code"] == "terms_required" and error["field"] == "terms"
    # Accepted over HTTP meanwhile (the page does): the same socket starts now.
    await database_sync_to_async(terms_accept)(voter_id="player-2")
    await comm.send_json_to({"type": "start", "challenge": phrase_challenge.slug})
    assert (await frames_until(comm, "attempt_start"))[-1]["attempt"]["state"] == "open"
    await comm.disconnect()


async def test_two_sockets_of_one_session_cannot_stream_two_turns_of_one_attempt(
    fake_upstream, live_models, phrase_challenge
):
    fake_upstream.default = FakeModel(tokens=["slow "] * 20, delay=0.05)
    first = await open_socket()
    await first.send_json_to({"type": "start", "challenge": phrase_challenge.slug})
    attempt = (await frames_until(first, "attempt_start"))[-1]["attempt"]
    cookie = next(value for name, value in first.scope["headers"] if name == b"cookie")
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie)]
    second = WebsocketCommunicator(application, "/ws/redteam", headers=headers)
    assert (await second.connect())[0]
    turn = {"type": "turn", "attempt_id": attempt["id"], "prompt": "Go"}
    await first.send_json_to(turn)
    await second.send_json_to(turn)
    answers = [await comm.receive_json_from(FRAME_TIMEOUT) for comm in (first, second)]
    assert sorted(a["type"] for a in answers) == ["error", "turn_start"]
    assert next(a for a in answers if a["type"] == "error")["code"] == "still_streaming"
    count = await database_sync_to_async(AttemptTurn.objects.count)()
    assert count == 1
    await first.disconnect()
    await second.disconnect()
