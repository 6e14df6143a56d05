"""The live battle websocket, driven by Channels' WebsocketCommunicator against the loopback
fake upstream through the real openai client."""

import json
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.utils import timezone

from arena.errors import ArenaError
from arena.models import Battle, BattleMessage, Provider
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.fake_openai import FakeModel
from config.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("upstream_clients")]

FRAME_TIMEOUT = 10


def _new_session() -> str:
    store = SessionStore()
    store["arena_voter_id"] = "voter-1"
    store.create()
    terms_accept(voter_id="voter-1")
    return store.session_key


async def open_socket(session_key: str | None = None) -> WebsocketCommunicator:
    if session_key is None:
        session_key = await database_sync_to_async(_new_session)()
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if session_key:
        headers.append((b"cookie", f"sessionid={session_key}".encode()))
    comm = WebsocketCommunicator(application, "/ws/battle", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    comm.session_key = session_key
    return comm


async def frames_until(comm, kind: str, raw: list[str] | None = None) -> list[dict]:
    """Frames up to and including the first of type ``kind``."""
    frames = []
    while True:
        message = await comm.receive_output(FRAME_TIMEOUT)
        text = message.get("text", "")
        if raw is not None:
            raw.append(text)
        frame = json.loads(text)
        frames.append(frame)
        if frame["type"] == kind:
            return frames


def texts(frames: list[dict]) -> dict[str, str]:
    out = {"a": "", "b": ""}
    for frame in frames:
        if frame["type"] == "deltas":
            for side in ("a", "b"):
                out[side] += frame.get(side, "")
    return out


def serve(fake_upstream, live_models, **specs: FakeModel) -> None:
    """Give each live model (by position 1, 2) its fake behaviour."""
    for key, spec in specs.items():
        fake_upstream.models[live_models[int(key[-1]) - 1].upstream_model_id] = spec


async def get_battle(battle_id) -> Battle:
    return await database_sync_to_async(
        lambda: Battle.objects.select_related("model_a", "model_b").get(pk=battle_id)
    )()


async def current_messages(battle_id) -> dict[str, BattleMessage]:
    def read():
        return {
            m.side: m
            for m in BattleMessage.objects.filter(battle_id=battle_id, superseded_at__isnull=True)
        }

    return await database_sync_to_async(read)()


async def test_both_answers_stream_concurrently_and_the_battle_becomes_votable(
    fake_upstream, live_models
):
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=["Alpha ", "one ", "two"], delay=0.01),
        m2=FakeModel(tokens=["Beta ", "three"], delay=0.01),
    )
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Say something"})
    frames = await frames_until(comm, "turn_end")
    start = frames[0]
    assert start["type"] == "turn_start" and start["turn"] == 0
    end = frames[-1]["battle"]
    assert end["state"] == "ready" and end["votable"] is True and end["models"] is None
    battle = await get_battle(start["battle"]["id"])
    by_upstream = {battle.model_a.upstream_model_id: "a", battle.model_b.upstream_model_id: "b"}
    streamed = texts(frames)
    assert streamed[by_upstream["upstream-quokka-1"]] == "Alpha one two"
    assert streamed[by_upstream["upstream-quokka-2"]] == "Beta three"
    ends = {f["side"]: f["status"] for f in frames if f["type"] == "side_end"}
    assert ends == {"a": "done", "b": "done"}
    messages = await current_messages(battle.pk)
    side_1 = messages[by_upstream["upstream-quokka-1"]]
    assert side_1.content == "Alpha one two" and side_1.status == "done"
    assert side_1.token_count == 3 and side_1.prompt_tokens == 2  # the upstream's usage
    assert side_1.finish_reason == "stop" and side_1.error == ""
    assert side_1.time_to_first_token_ms is not None and side_1.latency_ms is not None
    await comm.disconnect()


async def test_frames_sent_before_the_vote_never_name_a_model(fake_upstream, live_models):
    comm = await open_socket()
    raw: list[str] = []
    await comm.send_json_to({"type": "start", "prompt": "Who are you?"})
    frames = await frames_until(comm, "turn_end", raw)
    await comm.send_json_to(
        {"type": "turn", "battle_id": frames[0]["battle"]["id"], "prompt": "More"}
    )
    await frames_until(comm, "turn_end", raw)
    sent = "\n".join(raw)
    for model in live_models:
        for identity in (model.slug, model.display_name, model.upstream_model_id, "Quillwort"):
            assert identity not in sent
    await comm.disconnect()


async def test_a_battle_voted_over_http_takes_no_follow_up(fake_upstream, live_models):
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Hello"})
    frames = await frames_until(comm, "turn_end")
    battle_id = frames[0]["battle"]["id"]
    vote = await database_sync_to_async(vote_record)(
        battle_id=battle_id, session_key=comm.session_key, voter_id="voter-1", winner="model_a"
    )
    assert vote.vote.battle.state == Battle.State.VOTED
    await comm.send_json_to({"type": "turn", "battle_id": battle_id, "prompt": "again"})
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error["type"] == "error" and error["code"] == "already_voted"
    await comm.disconnect()


async def test_error_midstream_keeps_the_partial_answer_and_makes_the_battle_unvotable(
    fake_upstream, live_models
):
    serve(fake_upstream, live_models, m1=FakeModel(tokens=5, fault="error_midstream", fail_after=2))
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Break"})
    frames = await frames_until(comm, "turn_end")
    battle = frames[-1]["battle"]
    assert battle["state"] == "errored" and battle["votable"] is False
    failed = [f for f in frames if f["type"] == "side_end" and f["status"] == "error"]
    assert len(failed) == 1 and failed[0]["error"] == "The model's server returned an error."
    assert "crashed" not in json.dumps(frames)  # the upstream's own words stay server-side
    messages = await current_messages(battle["id"])
    broken = messages[failed[0]["side"]]
    assert broken.status == "error" and broken.content == "tok0 tok1 "
    assert "model crashed mid-answer" in broken.error
    with pytest.raises(ArenaError) as refused:
        await database_sync_to_async(vote_record)(
            battle_id=battle["id"], session_key=comm.session_key, voter_id="voter-1", winner="tie"
        )
    assert refused.value.code == "not_votable"
    await comm.disconnect()


async def test_http_500_is_not_retried_and_errors_that_side(fake_upstream, live_models):
    await database_sync_to_async(Provider.objects.update)(max_retries=3)
    serve(fake_upstream, live_models, m2=FakeModel(fault="http_500"))
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Hi"})
    frames = await frames_until(comm, "turn_end")
    assert frames[-1]["battle"]["state"] == "errored"
    assert len(fake_upstream.requests_for("upstream-quokka-2")) == 1
    await comm.disconnect()


async def test_a_hang_past_the_read_timeout_errors_that_side_and_closes_the_connection(
    fake_upstream, live_models
):
    await database_sync_to_async(Provider.objects.update)(read_timeout=0.3)
    serve(fake_upstream, live_models, m1=FakeModel(tokens=5, fault="hang", fail_after=1))
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Hi"})
    frames = await frames_until(comm, "turn_end")
    failed = [f for f in frames if f["type"] == "side_end" and f["status"] == "error"]
    assert [f["error"] for f in failed] == ["The model took too long to answer."]
    messages = await current_messages(frames[0]["battle"]["id"])
    assert messages[failed[0]["side"]].content == "tok0 "
    hung = await database_sync_to_async(fake_upstream.wait_closed)("upstream-quokka-1")
    assert hung.disconnected
    await comm.disconnect()


async def test_an_endless_stream_is_cut_at_the_output_token_limit(
    fake_upstream, live_models, settings
):
    settings.ARENA_LIVE_MAX_OUTPUT_TOKENS = 20
    serve(fake_upstream, live_models, m1=FakeModel(fault="endless", delay=0.001))
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Go on forever"})
    frames = await frames_until(comm, "turn_end")
    assert frames[-1]["battle"]["state"] == "ready"
    endless = await database_sync_to_async(fake_upstream.wait_closed)("upstream-quokka-1")
    assert endless.disconnected and endless.body["max_tokens"] == 20
    battle = await get_battle(frames[0]["battle"]["id"])
    side = "a" if battle.model_a.upstream_model_id == "upstream-quokka-1" else "b"
    message = (await current_messages(battle.pk))[side]
    assert message.finish_reason == "length" and message.token_count == 21
    await comm.disconnect()


async def test_disconnect_mid_stream_closes_both_upstream_calls_and_saves_them_aborted(
    fake_upstream, live_models
):
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=1000, delay=0.02),
        m2=FakeModel(fault="endless", delay=0.02),
    )
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Long answer please"})
    start = await comm.receive_json_from(FRAME_TIMEOUT)
    seen = {"a": 0, "b": 0}
    while min(seen.values()) < 3:
        frame = await comm.receive_json_from(FRAME_TIMEOUT)
        if frame["type"] == "deltas":
            for side in ("a", "b"):
                seen[side] += side in frame
    await comm.disconnect()
    for upstream_model in ("upstream-quokka-1", "upstream-quokka-2"):
        request = await database_sync_to_async(fake_upstream.wait_closed)(upstream_model)
        assert request.disconnected and not request.completed
    battle = await get_battle(start["battle"]["id"])
    assert battle.state == Battle.State.ABORTED
    for message in (await current_messages(battle.pk)).values():
        assert message.status == "aborted"
        assert message.content.startswith("tok0 tok1 tok2 ")


async def test_stop_aborts_both_sides_and_offers_no_vote(fake_upstream, live_models):
    fake_upstream.default = FakeModel(fault="endless", delay=0.01)
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Stop me"})
    await frames_until(comm, "deltas")
    await comm.send_json_to({"type": "stop"})
    frames = await frames_until(comm, "turn_end")
    assert frames[-1]["battle"]["state"] == "aborted" and not frames[-1]["battle"]["votable"]
    aborted = {f["side"] for f in frames if f["type"] == "side_end" and f["status"] == "aborted"}
    assert aborted == {"a", "b"}
    for upstream_model in ("upstream-quokka-1", "upstream-quokka-2"):
        request = await database_sync_to_async(fake_upstream.wait_closed)(upstream_model)
        assert request.disconnected
    await comm.disconnect()


async def test_a_follow_up_sends_each_model_its_own_conversation(fake_upstream, live_models):
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=["first one"]),
        m2=FakeModel(tokens=["first two"]),
    )
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Question 1"})
    frames = await frames_until(comm, "turn_end")
    battle_id = frames[0]["battle"]["id"]
    await comm.send_json_to({"type": "turn", "battle_id": battle_id, "prompt": "Question 2"})
    frames = await frames_until(comm, "turn_end")
    assert frames[0]["turn"] == 1 and frames[-1]["battle"]["state"] == "ready"
    assert len(frames[-1]["battle"]["turns"]) == 2
    last = fake_upstream.requests_for("upstream-quokka-1")[-1]
    assert last.messages == [
        {"role": "user", "content": "Question 1"},
        {"role": "assistant", "content": "first one"},
        {"role": "user", "content": "Question 2"},
    ]
    assert fake_upstream.requests_for("upstream-quokka-2")[-1].messages[1]["content"] == "first two"
    await comm.disconnect()


async def test_regenerate_replaces_the_last_answers_and_keeps_the_old_ones_on_record(
    fake_upstream, live_models
):
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Again?"})
    frames = await frames_until(comm, "turn_end")
    battle_id = frames[0]["battle"]["id"]
    fake_upstream.default = FakeModel(tokens=["fresh"])
    await comm.send_json_to({"type": "regenerate", "battle_id": battle_id})
    frames = await frames_until(comm, "turn_end")
    assert frames[0]["regenerated"] is True and frames[0]["turn"] == 0
    assert frames[-1]["battle"]["votable"] is True
    assert [t["a"]["content"] for t in frames[-1]["battle"]["turns"]] == ["fresh"]

    def rows():
        return list(
            BattleMessage.objects.filter(battle_id=battle_id).values_list(
                "side", "content", "superseded_at"
            )
        )

    stored = await database_sync_to_async(rows)()
    assert len(stored) == 4
    assert (
        sorted(c for _, c, s in stored if s is not None)
        == ["tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 "] * 2
    )
    await comm.disconnect()


async def test_another_sessions_battle_cannot_be_continued(fake_upstream, live_models):
    owner = await open_socket()
    await owner.send_json_to({"type": "start", "prompt": "Mine"})
    frames = await frames_until(owner, "turn_end")
    intruder = await open_socket()
    battle_id = frames[0]["battle"]["id"]
    for frame in (
        {"type": "turn", "battle_id": battle_id, "prompt": "Yours now"},
        {"type": "regenerate", "battle_id": battle_id},
    ):
        await intruder.send_json_to(frame)
        error = await intruder.receive_json_from(FRAME_TIMEOUT)
        assert error["type"] == "error" and error["code"] == "not_found"
    await owner.disconnect()
    await intruder.disconnect()


async def test_a_socket_without_a_valid_session_cannot_start_a_battle(fake_upstream, live_models):
    for key in ("", "forged-session-key"):
        comm = await open_socket(session_key=key)
        await comm.send_json_to({"type": "start", "prompt": "Hi"})
        error = await comm.receive_json_from(FRAME_TIMEOUT)
        assert error["type"] == "error" and error["code"] == "no_session"
        await comm.disconnect()
    assert await database_sync_to_async(Battle.objects.count)() == 0


async def test_an_expired_session_cannot_start_a_battle(fake_upstream, live_models):
    def expired_session() -> str:
        key = _new_session()
        Session.objects.filter(session_key=key).update(
            expire_date=timezone.now() - timedelta(seconds=1)
        )
        return key

    comm = await open_socket(session_key=await database_sync_to_async(expired_session)())
    await comm.send_json_to({"type": "start", "prompt": "Hi"})
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error["type"] == "error" and error["code"] == "no_session"
    await comm.disconnect()
    assert await database_sync_to_async(Battle.objects.count)() == 0


async def test_limits_become_error_frames_naming_the_field(fake_upstream, live_models, settings):
    settings.ARENA_LIVE_MAX_PROMPT_CHARS = 10
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "x" * 11})
    error = await comm.receive_json_from(FRAME_TIMEOUT)
    assert error == {
        "type": "error",
        "code": "prompt_too_long",
        "message": "The prompt is 11 characters long; the limit is 10.",
        "field": "prompt",
    }
    await comm.send_json_to({"type": "launch"})
    assert (await comm.receive_json_from(FRAME_TIMEOUT))["code"] == "invalid"
    await comm.disconnect()


async def test_named_mode_shows_the_chosen_models_from_the_start(fake_upstream, live_models):
    comm = await open_socket()
    await comm.send_json_to({"type": "models"})
    listed = await comm.receive_json_from(FRAME_TIMEOUT)
    assert [m["slug"] for m in listed["models"]] == ["zephyrine-1", "zephyrine-2"]
    await comm.send_json_to(
        {"type": "start", "prompt": "Hi", "mode": "named", "models": ["zephyrine-2", "zephyrine-1"]}
    )
    frames = await frames_until(comm, "turn_end")
    battle = frames[-1]["battle"]
    assert battle["mode"] == "named" and battle["models"]["a"]["slug"] == "zephyrine-2"
    await comm.disconnect()


async def test_malformed_frames_get_error_frames_and_the_socket_stays_usable(
    fake_upstream, live_models
):
    comm = await open_socket()
    await comm.send_to(text_data="{not json")
    assert await comm.receive_json_from(FRAME_TIMEOUT) == {
        "type": "error",
        "code": "invalid_json",
        "message": "The frame is not valid JSON.",
        "field": "frame",
    }
    await comm.send_to(bytes_data=b"\x00\x01")
    assert (await comm.receive_json_from(FRAME_TIMEOUT))["code"] == "invalid_frame"
    await comm.send_json_to(["start"])
    assert (await comm.receive_json_from(FRAME_TIMEOUT))["code"] == "invalid"
    await comm.send_json_to({"type": "start", "prompt": "Still here?"})
    frames = await frames_until(comm, "turn_end")
    assert frames[-1]["battle"]["votable"] is True
    await comm.disconnect()


async def test_a_failed_save_at_the_end_of_a_turn_is_retried(
    fake_upstream, live_models, monkeypatch
):
    from arena.live import consumer, runtime

    real, calls = runtime.turn_finish, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database restarting")
        return real(*args)

    monkeypatch.setattr(runtime, "turn_finish", flaky)
    monkeypatch.setattr(consumer, "_FINISH_RETRY_SECONDS", 0.01)
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Hello"})
    end = (await frames_until(comm, "turn_end"))[-1]
    assert end["battle"]["state"] == "ready" and len(calls) == 2
    await comm.disconnect()


async def test_a_turn_whose_end_cannot_be_saved_says_so_and_is_swept_later(
    fake_upstream, live_models, monkeypatch, settings
):
    from arena.live import consumer, runtime
    from arena.live.sweep import live_battles_sweep

    def broken(*args):
        raise RuntimeError("database gone")

    monkeypatch.setattr(runtime, "turn_finish", broken)
    monkeypatch.setattr(consumer, "_FINISH_RETRY_SECONDS", 0.01)
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Hello"})
    frames = await frames_until(comm, "error")
    assert frames[-1]["code"] == "turn_lost" and "new battle" in frames[-1]["message"]
    battle_id = frames[0]["battle"]["id"]
    assert (await get_battle(battle_id)).state == Battle.State.STREAMING
    await comm.disconnect()
    settings.ARENA_LIVE_ANSWER_SECONDS = 0
    later = timezone.now() + timedelta(seconds=61)
    assert await database_sync_to_async(live_battles_sweep)(now=later) == 1
    assert (await get_battle(battle_id)).state == Battle.State.ABORTED


def assert_text_precedes_ends(frames: list[dict]) -> None:
    """No side's text comes after its ``side_end``, and ``turn_end`` is the last frame."""
    ended: set[str] = set()
    for frame in frames:
        if frame["type"] == "deltas":
            assert set(frame) - {"type"} <= {"a", "b"} - ended, frame
            assert all(isinstance(frame[s], str) and frame[s] for s in set(frame) - {"type"})
        elif frame["type"] == "side_end":
            ended.add(frame["side"])
    assert ended == {"a", "b"} and frames[-1]["type"] == "turn_end"


async def test_both_sides_pieces_share_frames_and_each_side_streams_its_whole_answer(
    fake_upstream, live_models, settings
):
    # A window wider than the gap between chunks: every frame carries several of them.
    settings.ARENA_DELTA_COALESCE_MS = 50
    tokens_1 = [f"one{i} " for i in range(26)]
    tokens_2 = [f"two{i} " for i in range(26)]
    serve(
        fake_upstream,
        live_models,
        m1=FakeModel(tokens=tokens_1, delay=0.02),
        m2=FakeModel(tokens=tokens_2, delay=0.02),
    )
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Count"})
    frames = await frames_until(comm, "turn_end")
    battle = await get_battle(frames[0]["battle"]["id"])
    by_upstream = {battle.model_a.upstream_model_id: "a", battle.model_b.upstream_model_id: "b"}
    side_1, side_2 = by_upstream["upstream-quokka-1"], by_upstream["upstream-quokka-2"]
    streamed = texts(frames)
    assert streamed[side_1] == "".join(tokens_1) and streamed[side_2] == "".join(tokens_2)
    carrying = [f for f in frames if f["type"] == "deltas"]
    assert len(carrying) < len(tokens_1 + tokens_2) / 2
    assert any("a" in f and "b" in f for f in carrying)  # both sides in one frame
    assert_text_precedes_ends(frames)
    messages = await current_messages(battle.pk)
    assert {side: m.content for side, m in messages.items()} == streamed
    await comm.disconnect()


@pytest.mark.parametrize("window_ms", [0, 2])
async def test_text_shown_before_a_stop_is_exactly_what_is_saved(
    fake_upstream, live_models, settings, window_ms
):
    settings.ARENA_DELTA_COALESCE_MS = window_ms
    fake_upstream.default = FakeModel(fault="endless", delay=0.005)
    comm = await open_socket()
    await comm.send_json_to({"type": "start", "prompt": "Stop me"})
    frames = await frames_until(comm, "deltas")
    while not all(texts(frames).values()):
        frames += await frames_until(comm, "deltas")
    await comm.send_json_to({"type": "stop"})
    frames += await frames_until(comm, "turn_end")
    assert_text_precedes_ends(frames)
    streamed = texts(frames)
    messages = await current_messages(frames[0]["battle"]["id"])
    assert {side: m.content for side, m in messages.items()} == streamed
    await comm.disconnect()
