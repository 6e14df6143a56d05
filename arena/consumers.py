"""The live battle websocket: one socket per battle page, one turn streaming at a time.

Frames from the page (JSON objects with a ``type``):

- ``start``       {prompt, mode?: "anonymous"|"named", models?: [slug_a, slug_b]}
- ``turn``        {battle_id, prompt}      a follow-up with the same pair
- ``regenerate``  {battle_id}              new answers to the last turn
- ``stop``        {}                       cancel the turn that is streaming
- ``models``      {}                       the models named mode may pick from
- ``suggest``     {}                       a prompt from the pool

Frames to the page:

- ``turn_start``  {battle, turn, prompt, regenerated}
- ``delta``       {side, text}             a piece of one side's answer
- ``side_end``    {side, status, error}    status done|error|aborted; error is a public message
- ``turn_end``    {battle}                 saved state; ``battle.votable`` unlocks voting
- ``models``      {models}, ``suggestion`` {prompt}
- ``error``       {code, message, field}   an ``ArenaError``, made into a frame in one place;
                  ``server_error`` for anything unexpected (logged with its traceback);
                  ``turn_lost`` when the end of a turn could not be saved yet: the answers
                  stay in memory and the save is retried (a ``turn_end`` follows once it
                  lands), and a ``regenerate`` or ``turn`` for that battle saves it first

Model names appear only in ``models`` frames (asked for by named mode) and in the battle of a
named-mode turn; the vote that reveals an anonymous pair goes over HTTP as for pool battles.
Tokens go from this consumer's own tasks straight to its socket, never through the channel
layer. On disconnect (or ``stop``) both upstream calls are cancelled, their HTTP responses
closed, and what was produced is saved as aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from arena.errors import ArenaError, ErrorCode, server_error, still_streaming
from arena.inputs import json_parse
from arena.models import Battle
from arena.selectors import battle_payload_by_id, live_models_public, prompt_suggestion
from arena.services.live import (
    TurnPlan,
    battle_regenerate,
    battle_start_live,
    battle_turn_add,
    battle_turn_finish,
    messages_progress,
)
from arena.upstream import Answer, stream_answer

log = logging.getLogger(__name__)
T = TypeVar("T")

# Few threads: each one running ORM code holds the GIL against the event loop that relays the
# tokens, and the database (SQLite's one writer, PostgreSQL's connections) gains little from
# more. Two let a slow call (a start) overlap another without a convoy of runnable threads.
_DB_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="arena-db")


def _db(func: Callable[..., T]) -> Callable[..., Any]:
    """``func`` run in a small pool of database threads, with Django's connection upkeep.

    ``database_sync_to_async`` alone runs every call of the process in one shared thread; with
    hundreds of battles, starting one waits behind every other battle's saves, and that thread's
    queue holds the GIL against the token relay. Nothing here needs thread affinity (each call
    is one self-contained service call, its transaction opened and closed inside it), so the
    calls run side by side, each thread on its own connection.
    """
    wrapped: Callable[..., Any] = database_sync_to_async(
        func, thread_sensitive=False, executor=_DB_POOL
    )
    return wrapped


def _turn_finish(battle_id: uuid.UUID, answers: dict[str, tuple[int, Answer]]) -> dict[str, Any]:
    """Save the turn's end and read the battle as the page is shown it, in one thread hop."""
    battle_turn_finish(battle_id=battle_id, answers=answers)
    return battle_payload_by_id(battle_id=battle_id)


def _session_key(session: Any) -> str:
    """The scope's session key, if it names a session that exists (a forged cookie does not)."""
    key = getattr(session, "session_key", None)
    if key and session.exists(key):
        return str(key)
    return ""


def _loaded_session_key(session: Any) -> str | None:
    """The session key without a database query when the session is loaded already, else None.

    Channels' ``AuthMiddleware`` loads the session (to find the user) before the consumer runs;
    loading a session whose key names no live row (forged, expired) clears ``session_key``, so
    a loaded session's key is one that exists. ``_session_cache`` is how Django's session
    backends mark a loaded session; without it, ``_session_key`` asks the database.
    """
    if session is None:
        return ""
    if not hasattr(session, "_session_cache"):
        return None
    return str(session.session_key or "")


_SAVE_SLICE = 25  # messages per partial save
_FINISH_RETRY_SECONDS = 0.5
# After a turn is reported lost, its end is saved again with back-off (doubling from the first
# delay up to the longest) for at most the window; ``live_battles_sweep`` settles the battle if
# the process stops first, and a save that comes after the sweep changes nothing.
_SAVE_RETRY_FIRST_SECONDS = 1.0
_SAVE_RETRY_MAX_SECONDS = 15.0
_SAVE_RETRY_WINDOW_SECONDS = 600.0

SERVER_ERROR_FRAME = server_error().as_frame()
TURN_LOST_FRAME = ArenaError(
    ErrorCode.TURN_LOST,
    "The answers could not be saved yet (they will be once the database is back). "
    "Regenerate them, or start a new battle.",
    status=503,
).as_frame()


class _ProgressSaver:
    """Writes the partial answers of every turn streaming in this event loop, now and then.

    So that a crash loses seconds, not answers. One save (one thread hop, one transaction, one
    statement run for every message) per interval for all the turns of the process, only for
    sides whose text grew, rather than one per battle: at 500 battles that was 100 hops and
    transactions a second, each running ORM code in a database thread that holds the GIL
    against the event loop relaying the tokens. What was produced is saved in full at the end
    of each turn whatever happens here.
    """

    def __init__(self) -> None:
        self.turns: dict[int, tuple[TurnPlan, dict[str, Answer], dict[str, int]]] = {}
        self.task: asyncio.Task[None] | None = None

    def add(self, plan: TurnPlan, answers: dict[str, Answer]) -> None:
        self.turns[id(plan)] = (plan, answers, dict.fromkeys(answers, 0))
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, plan: TurnPlan) -> None:
        self.turns.pop(id(plan), None)

    async def _run(self) -> None:
        while self.turns:
            await asyncio.sleep(settings.ARENA_LIVE_SAVE_SECONDS)
            grown = []  # (message id, text, the turn's saved counts, side, parts)
            for plan, answers, saved in list(self.turns.values()):
                for side, answer in answers.items():
                    parts = len(answer.parts)
                    if answer.status == "streaming" and parts > saved[side]:
                        grown.append((plan.sides[side].message_id, answer.text, saved, side, parts))
            # In slices: the thread holds the GIL while it adapts and sends a slice, so one
            # statement over hundreds of rows would stall the relay of every battle at once.
            for start in range(0, len(grown), _SAVE_SLICE):
                chunk = grown[start : start + _SAVE_SLICE]
                try:
                    await _db(messages_progress)(contents={row[0]: row[1] for row in chunk})
                except Exception:
                    # Counted as saved only once written: the next round tries these again.
                    log.exception("saving partial answers failed")
                    continue
                for _, _, saved, side, parts in chunk:
                    saved[side] = parts


# One saver per event loop (tests run one loop per test; a server, one per process).
_SAVERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ProgressSaver] = (
    weakref.WeakKeyDictionary()
)


class _TurnSave:
    """The end of one turn, held in memory (both answers in full) until it is saved.

    ``attempt`` saves it at most once, whoever asks: the consumer at the end of the turn, the
    retry with back-off after the page was told the turn was lost, or a ``regenerate`` or
    ``turn`` frame for that battle, which needs it saved first. The lock keeps them in order.
    """

    def __init__(self, plan: TurnPlan, answers: dict[str, Answer]) -> None:
        self.battle_id = plan.battle_id
        self.answers = {s: (plan.sides[s].message_id, a) for s, a in answers.items()}
        self.lock = asyncio.Lock()
        self.payload: dict[str, Any] | None = None  # the battle as saved, once it is

    async def attempt(self) -> dict[str, Any] | None:
        """The saved battle's payload, saving it now if it is not yet; None if that failed."""
        async with self.lock:
            return await self.attempt_locked()

    async def attempt_locked(self) -> dict[str, Any] | None:
        if self.payload is None:
            try:
                self.payload = await _db(_turn_finish)(self.battle_id, self.answers)
            except Exception:
                log.exception("saving the end of a live turn failed (battle %s)", self.battle_id)
        return self.payload


# The turns of this event loop whose end is not saved yet, by battle id.
_UNSAVED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[uuid.UUID, _TurnSave]] = (
    weakref.WeakKeyDictionary()
)
_RETRIES: set[asyncio.Task[None]] = set()  # strong references while they run


def _unsaved_turns() -> dict[uuid.UUID, _TurnSave]:
    return _UNSAVED.setdefault(asyncio.get_running_loop(), {})


async def _save_unsaved(battle_id: object) -> None:
    """Save the end of this battle's lost turn, if this process holds one, before the battle is
    continued; an ``ArenaError`` while it still cannot be saved."""
    try:
        key = uuid.UUID(str(battle_id))
    except ValueError:
        return  # not a battle id: the service says so
    save = _unsaved_turns().get(key)
    if save is None:
        return
    if await save.attempt() is None:
        raise ArenaError(
            ErrorCode.NOT_SAVED_YET,
            "The last answers of this battle are not saved yet; try again in a moment.",
            status=503,
        )
    _unsaved_turns().pop(key, None)


async def _retry_save(save: _TurnSave, consumer: weakref.ref[BattleConsumer]) -> None:
    """Save a lost turn's end with back-off until it lands or the window ends; then tell the
    page (``turn_end``) if its socket is still open."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + _SAVE_RETRY_WINDOW_SECONDS
    delay = _SAVE_RETRY_FIRST_SECONDS
    try:
        while save.payload is None and loop.time() < give_up_at:
            await asyncio.sleep(min(delay, max(0.0, give_up_at - loop.time())))
            delay = min(delay * 2, _SAVE_RETRY_MAX_SECONDS)
            async with save.lock:
                if save.payload is not None:
                    return  # saved meanwhile, by a frame that continues the battle
                payload = await save.attempt_locked()
                if payload is not None:
                    log.warning("saved the end of a lost live turn (battle %s)", save.battle_id)
                    owner = consumer()
                    if owner is not None:  # sent under the lock: before any turn that follows
                        await owner._send({"type": "turn_end", "battle": payload})
        if save.payload is None:
            log.error(
                "gave up saving the end of a live turn (battle %s); the sweep settles it",
                save.battle_id,
            )
    finally:
        unsaved = _unsaved_turns()
        if unsaved.get(save.battle_id) is save:
            del unsaved[save.battle_id]


def _progress_saver() -> _ProgressSaver:
    loop = asyncio.get_running_loop()
    saver = _SAVERS.get(loop)
    if saver is None:
        saver = _SAVERS[loop] = _ProgressSaver()
    return saver


class BattleConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    # Nothing is sent to a battle socket from elsewhere, so it does not subscribe to the channel
    # layer: no Redis connection held in a blocking receive per open socket.
    channel_layer_alias = None

    async def connect(self) -> None:
        session = self.scope.get("session")
        key = _loaded_session_key(session)
        self.session_key = key if key is not None else await _db(_session_key)(session)
        # The peer's address as the ASGI server reports it (behind a proxy, the server's
        # --forwarded-allow-ips makes it the visitor's): the key of the live-call rate limit.
        client = self.scope.get("client") or (None, None)
        self.client_ip: str | None = client[0]
        self.turn_task: asyncio.Task[None] | None = None
        self.lost: set[uuid.UUID] = set()  # battles whose last turn is not saved yet
        self.connected = True
        await self.accept()

    async def disconnect(self, code: int) -> None:
        self.connected = False
        await self._stop_turn()

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Dispatch one frame; a refused frame is answered with an error frame.

        An ``ArenaError`` is sent as its own frame (``as_frame``); any other exception raised
        while the frame is handled is logged with its traceback and answered with the generic
        ``server_error`` frame, so it neither closes the socket without a word nor skips
        ``disconnect`` (which cancels a turn's upstream calls). A cancellation is not caught.
        The turn itself streams in its own task (``_run_turn``), after this has returned: its
        failures end in ``side_end`` and ``turn_end``/``turn_lost`` frames, not here.
        """
        try:
            if text_data is None:
                raise ArenaError(
                    ErrorCode.INVALID_FRAME, "Frames are JSON text, not binary.", field="frame"
                )
            content = json_parse(text_data, what="The frame", field="frame")
            await self._dispatch(content)
        except ArenaError as exc:
            await self._send(exc.as_frame())
        except Exception:
            log.exception("a websocket frame failed")
            await self._send(SERVER_ERROR_FRAME)

    async def _dispatch(self, content: Any) -> None:
        if not isinstance(content, dict):
            raise ArenaError(ErrorCode.INVALID, "Frames are JSON objects with a type.")
        kind = content.get("type")
        if kind == "start":
            await self._stop_turn()  # a new battle replaces one still streaming here
            for battle_id in list(self.lost):  # they count against the session's streaming
                with contextlib.suppress(ArenaError):
                    await _save_unsaved(battle_id)
                    self.lost.discard(battle_id)
            plan = await _db(battle_start_live)(
                session_key=self.session_key,
                prompt=content.get("prompt"),
                mode=content.get("mode") or Battle.Mode.ANONYMOUS,
                model_slugs=content.get("models"),
                client_ip=self.client_ip,
            )
            await self._begin(plan)
        elif kind == "turn":
            self._refuse_while_streaming()
            await _save_unsaved(content.get("battle_id"))
            plan = await _db(battle_turn_add)(
                battle_id=content.get("battle_id"),
                session_key=self.session_key,
                prompt=content.get("prompt"),
                client_ip=self.client_ip,
            )
            await self._begin(plan)
        elif kind == "regenerate":
            self._refuse_while_streaming()
            # A turn reported lost is saved first, so its answers are kept (superseded) and the
            # battle is no longer streaming: regenerate works as soon as the page hears of it.
            await _save_unsaved(content.get("battle_id"))
            plan = await _db(battle_regenerate)(
                battle_id=content.get("battle_id"),
                session_key=self.session_key,
                client_ip=self.client_ip,
            )
            await self._begin(plan)
        elif kind == "stop":
            await self._stop_turn()
        elif kind == "models":
            models = await _db(live_models_public)()
            await self._send({"type": "models", "models": models})
        elif kind == "suggest":
            prompt = await _db(prompt_suggestion)()
            await self._send({"type": "suggestion", "prompt": prompt})
        else:
            shown = repr(kind) if isinstance(kind, str) and len(kind) <= 40 else "this"
            raise ArenaError(ErrorCode.INVALID, f"Unknown frame type {shown}.", field="type")

    def _refuse_while_streaming(self) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            raise still_streaming(status=400)

    async def _send(self, frame: dict[str, Any]) -> None:
        await self._send_text(json.dumps(frame))

    async def _send_text(self, text: str) -> None:
        if not self.connected:
            return
        try:
            await self.base_send({"type": "websocket.send", "text": text})
        except Exception:  # the socket went away; disconnect() does the cleanup
            self.connected = False

    async def _begin(self, plan: TurnPlan) -> None:
        await self._send(
            {
                "type": "turn_start",
                "battle": plan.battle,
                "turn": plan.turn,
                "prompt": plan.prompt,
                "regenerated": plan.regenerated,
            }
        )
        self.turn_task = asyncio.create_task(self._run_turn(plan))

    async def _stop_turn(self) -> None:
        task, self.turn_task = self.turn_task, None
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # --- one turn: two sides streaming concurrently ---------------------------------------
    async def _run_turn(self, plan: TurnPlan) -> None:
        answers = {side: Answer() for side in plan.sides}
        sides = [
            asyncio.create_task(self._run_side(plan, side, answers[side])) for side in plan.sides
        ]
        progress = _progress_saver()
        progress.add(plan, answers)
        try:
            await asyncio.wait(sides)
        finally:
            # Reached on completion, on stop and on disconnect alike: whatever was produced is
            # saved, and a cancelled side has closed its upstream response before this goes on.
            progress.remove(plan)
            for task in sides:
                task.cancel()
            await asyncio.gather(*sides, return_exceptions=True)
            for side, answer in answers.items():
                if answer.status in ("streaming", "aborted"):
                    answer.status = "aborted"
                    await self._send({"type": "side_end", "side": side, "status": "aborted"})
            await self._finish_turn(plan, answers)

    async def _finish_turn(self, plan: TurnPlan, answers: dict[str, Answer]) -> None:
        """Save the turn's end and send it; a failed save is retried once, then reported.

        Without a ``turn_end`` the page would wait for ever; on a second failure it is told the
        turn was lost (for now): the answers stay in memory and their save is retried with
        back-off (``_retry_save``) until the database is back, and a ``regenerate`` or
        ``turn`` for the battle saves them first. Only if this process stops before that does
        ``live_battles_sweep`` settle the battle, with the last partial texts.
        """
        save = _TurnSave(plan, answers)
        for attempt in (1, 2):
            payload = await save.attempt()
            if payload is not None:
                await self._send({"type": "turn_end", "battle": payload})
                return
            if attempt == 1:
                await asyncio.sleep(_FINISH_RETRY_SECONDS)
        _unsaved_turns()[plan.battle_id] = save
        self.lost.add(plan.battle_id)
        retry = asyncio.get_running_loop().create_task(_retry_save(save, weakref.ref(self)))
        _RETRIES.add(retry)
        retry.add_done_callback(_RETRIES.discard)
        await self._send(TURN_LOST_FRAME)

    async def _run_side(self, plan: TurnPlan, side: str, answer: Answer) -> None:
        side_plan = plan.sides[side]
        # The per-token frame is the one hot path: its fixed part is built once, and only the
        # text is encoded per token (the same JSON as json.dumps of the whole frame).
        head = '{"type": "delta", "side": ' + json.dumps(side) + ', "text": '
        send_text = self._send_text

        async def on_delta(text: str) -> None:
            await send_text(head + json.dumps(text) + "}")

        await stream_answer(
            side_plan.target,
            side_plan.history,
            answer=answer,
            on_delta=on_delta,
            max_tokens=plan.max_tokens,
            deadline_seconds=settings.ARENA_LIVE_ANSWER_SECONDS,
        )
        if answer.status == "error":
            log.warning(
                "live answer failed (battle %s side %s): %s", plan.battle_id, side, answer.error
            )
        await self._send(
            {
                "type": "side_end",
                "side": side,
                "status": answer.status,
                "error": answer.public_error,
            }
        )
