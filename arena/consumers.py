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
                  ``turn_lost`` when the end of a turn could not be saved (start over)

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
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from arena.errors import ArenaError
from arena.models import Battle
from arena.selectors import battle_payload, prompt_suggestion
from arena.services.live import (
    TurnPlan,
    battle_regenerate,
    battle_start_live,
    battle_turn_add,
    battle_turn_finish,
    live_models_public,
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


def _battle_payload(battle_id: Any) -> dict[str, Any]:
    battle = Battle.objects.select_related("model_a", "model_b").get(pk=battle_id)
    return battle_payload(battle=battle)


def _turn_finish(battle_id: Any, answers: dict[str, tuple[int, Answer]]) -> dict[str, Any]:
    """Save the turn's end and read the battle as the page is shown it, in one thread hop."""
    battle_turn_finish(battle_id=battle_id, answers=answers)
    return _battle_payload(battle_id)


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
            contents = {}
            for plan, answers, saved in list(self.turns.values()):
                for side, answer in answers.items():
                    if answer.status == "streaming" and len(answer.parts) > saved[side]:
                        saved[side] = len(answer.parts)
                        contents[plan.sides[side].message_id] = answer.text
            # In slices: the thread holds the GIL while it adapts and sends a slice, so one
            # statement over hundreds of rows would stall the relay of every battle at once.
            items = list(contents.items())
            for start in range(0, len(items), _SAVE_SLICE):
                try:
                    await _db(messages_progress)(contents=dict(items[start : start + _SAVE_SLICE]))
                except Exception:
                    log.exception("saving partial answers failed")


# One saver per event loop (tests run one loop per test; a server, one per process).
_SAVERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ProgressSaver] = (
    weakref.WeakKeyDictionary()
)


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
        self.connected = True
        await self.accept()

    async def disconnect(self, code: int) -> None:
        self.connected = False
        await self._stop_turn()

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Every frame, good or malformed, ends in a dispatch or an error frame, never a crash."""
        try:
            if text_data is None:
                raise ArenaError(
                    "invalid_frame", "Frames are JSON text, not binary.", field="frame"
                )
            try:
                content = await self.decode_json(text_data)
            except ValueError:
                raise ArenaError(
                    "invalid_json", "The frame is not valid JSON.", field="frame"
                ) from None
            await self._dispatch(content)
        except ArenaError as exc:
            await self._send(
                {
                    "type": "error",
                    "code": exc.code,
                    "message": exc.message,
                    "field": exc.field,
                }
            )

    async def _dispatch(self, content: Any) -> None:
        if not isinstance(content, dict):
            raise ArenaError("invalid", "Frames are JSON objects with a type.")
        kind = content.get("type")
        if kind == "start":
            await self._stop_turn()  # a new battle replaces one still streaming here
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
            plan = await _db(battle_turn_add)(
                battle_id=content.get("battle_id"),
                session_key=self.session_key,
                prompt=content.get("prompt"),
                client_ip=self.client_ip,
            )
            await self._begin(plan)
        elif kind == "regenerate":
            self._refuse_while_streaming()
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
            raise ArenaError("invalid", f"Unknown frame type {kind!r}.", field="type")

    def _refuse_while_streaming(self) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            raise ArenaError("still_streaming", "Wait for both answers (or stop them) first.")

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
        turn was lost, and ``live_battles_sweep`` settles the battle later.
        """
        saved = {s: (plan.sides[s].message_id, a) for s, a in answers.items()}
        for attempt in (1, 2):
            try:
                payload = await _db(_turn_finish)(plan.battle_id, saved)
            except Exception:
                log.exception(
                    "saving the end of a live turn failed (battle %s, attempt %d)",
                    plan.battle_id,
                    attempt,
                )
                if attempt == 1:
                    await asyncio.sleep(_FINISH_RETRY_SECONDS)
                continue
            await self._send({"type": "turn_end", "battle": payload})
            return
        await self._send(
            {
                "type": "error",
                "code": "turn_lost",
                "message": "This battle could not be saved. Please start a new battle.",
                "field": None,
            }
        )

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
