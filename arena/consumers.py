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
- ``error``       {code, message, field}   an ``ArenaError``, made into a frame in one place

Model names appear only in ``models`` frames (asked for by named mode) and in the battle of a
named-mode turn; the vote that reveals an anonymous pair goes over HTTP as for pool battles.
Tokens go from this consumer's own tasks straight to its socket, never through the channel
layer. On disconnect (or ``stop``) both upstream calls are cancelled, their HTTP responses
closed, and what was produced is saved as aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

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
    message_progress,
)
from arena.upstream import Answer, stream_answer

log = logging.getLogger(__name__)


def _battle_payload(battle_id: Any) -> dict[str, Any]:
    battle = Battle.objects.select_related("model_a", "model_b").get(pk=battle_id)
    return battle_payload(battle=battle)


def _session_key(session: Any) -> str:
    """The scope's session key, if it names a session that exists (a forged cookie does not)."""
    key = getattr(session, "session_key", None)
    if key and session.exists(key):
        return str(key)
    return ""


class BattleConsumer(AsyncJsonWebsocketConsumer):
    # Nothing is sent to a battle socket from elsewhere, so it does not subscribe to the channel
    # layer: no Redis connection held in a blocking receive per open socket.
    channel_layer_alias = None

    async def connect(self) -> None:
        self.session_key = await database_sync_to_async(_session_key)(self.scope.get("session"))
        self.turn_task: asyncio.Task[None] | None = None
        self.connected = True
        await self.accept()

    async def disconnect(self, code: int) -> None:
        self.connected = False
        await self._stop_turn()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        try:
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
            plan = await database_sync_to_async(battle_start_live)(
                session_key=self.session_key,
                prompt=content.get("prompt"),
                mode=content.get("mode") or Battle.Mode.ANONYMOUS,
                model_slugs=content.get("models"),
            )
            await self._begin(plan)
        elif kind == "turn":
            self._refuse_while_streaming()
            plan = await database_sync_to_async(battle_turn_add)(
                battle_id=content.get("battle_id"),
                session_key=self.session_key,
                prompt=content.get("prompt"),
            )
            await self._begin(plan)
        elif kind == "regenerate":
            self._refuse_while_streaming()
            plan = await database_sync_to_async(battle_regenerate)(
                battle_id=content.get("battle_id"), session_key=self.session_key
            )
            await self._begin(plan)
        elif kind == "stop":
            await self._stop_turn()
        elif kind == "models":
            models = await database_sync_to_async(live_models_public)()
            await self._send({"type": "models", "models": models})
        elif kind == "suggest":
            prompt = await database_sync_to_async(prompt_suggestion)()
            await self._send({"type": "suggestion", "prompt": prompt})
        else:
            raise ArenaError("invalid", f"Unknown frame type {kind!r}.", field="type")

    def _refuse_while_streaming(self) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            raise ArenaError("still_streaming", "Wait for both answers (or stop them) first.")

    async def _send(self, frame: dict[str, Any]) -> None:
        if not self.connected:
            return
        try:
            await self.send_json(frame)
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
        saver = asyncio.create_task(self._save_progress(plan, answers))
        try:
            await asyncio.wait(sides)
        finally:
            # Reached on completion, on stop and on disconnect alike: whatever was produced is
            # saved, and a cancelled side has closed its upstream response before this goes on.
            for task in (*sides, saver):
                task.cancel()
            await asyncio.gather(*sides, saver, return_exceptions=True)
            for side, answer in answers.items():
                if answer.status in ("streaming", "aborted"):
                    answer.status = "aborted"
                    await self._send({"type": "side_end", "side": side, "status": "aborted"})
            try:
                await database_sync_to_async(battle_turn_finish)(
                    battle_id=plan.battle_id,
                    answers={s: (plan.sides[s].message_id, a) for s, a in answers.items()},
                )
                payload = await database_sync_to_async(_battle_payload)(plan.battle_id)
                await self._send({"type": "turn_end", "battle": payload})
            except Exception:
                log.exception("saving the end of a live turn failed (battle %s)", plan.battle_id)

    async def _run_side(self, plan: TurnPlan, side: str, answer: Answer) -> None:
        side_plan = plan.sides[side]

        async def on_delta(text: str) -> None:
            await self._send({"type": "delta", "side": side, "text": text})

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

    async def _save_progress(self, plan: TurnPlan, answers: dict[str, Answer]) -> None:
        """Write the partial answers now and then, so a crash loses seconds, not answers."""
        saved = dict.fromkeys(answers, 0)
        interval = settings.ARENA_LIVE_SAVE_SECONDS
        next_at = time.monotonic() + interval
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at += interval
            for side, answer in answers.items():
                if answer.status == "streaming" and len(answer.parts) > saved[side]:
                    saved[side] = len(answer.parts)
                    await database_sync_to_async(message_progress)(
                        message_id=plan.sides[side].message_id, content=answer.text
                    )
