"""The red-teaming websocket: one socket per play page, one answer streaming at a time.

Frames from the page (JSON objects with a ``type``):

- ``start``      {challenge?}             a new attempt at the challenge (its slug)
- ``turn``       {attempt_id, prompt}     the player's next message
- ``surrender``  {attempt_id}             give up (the model is revealed)
- ``rejudge``    {attempt_id}             ask the judge again after ``judge_unavailable``
- ``stop``       {}                       cancel the answer that is streaming

Frames to the page:

- ``attempt_start`` {attempt}             the attempt (``redteam.payloads.AttemptJson``)
- ``turn_start``  {attempt_id, turn, prompt}
- ``deltas``      {text}                  the next piece of the answer
- ``turn_end``    {turn, attempt}         the saved turn with the judge's verdict
- ``attempt_end`` {attempt}               state, model (revealed), verdict_reason, evidence
- ``error``       {code, message, field}  an ``ArenaError`` (``arena.errors``), as the battle
                  socket sends them; ``server_error`` for anything unexpected (logged)

Admission, frame intake, the idle clock, the caps and the close codes are the base every arena
socket shares (``arena.live.websocket``): the session is the visitor's, the socket counts
against its address's socket cap together with the battle sockets, frames are bounded in size,
and a socket with no frame and nothing streaming for ``ARENA_WS_IDLE_SECONDS`` is closed (the
page opens a new one when it next sends). Tokens go from this consumer's own task straight to
the socket; on ``stop`` or disconnect the upstream call is cancelled and what was produced is
saved (and judged).
"""

from __future__ import annotations

import asyncio
import logging
from importlib import import_module
from typing import Any

from django.conf import settings
from django.utils.translation import gettext

from arena.api import VOTER_SESSION_KEY
from arena.errors import ArenaError, ErrorCode
from arena.live.runtime import db
from arena.live.upstream import Answer
from arena.live.websocket import ArenaSocket, header, server_error_frame, unknown_frame
from arena.services.vote_guards import CHALLENGE_SESSION_KEY
from redteam.judges import judge_failed
from redteam.services import (
    AttemptEnded,
    Player,
    TurnOutcome,
    TurnPlan,
    attempt_rejudge,
    attempt_start,
    attempt_surrender,
    attempt_turn_add,
    attempt_turn_finish,
)

log = logging.getLogger(__name__)


def _session(session_key: str) -> tuple[str, bool]:
    """The session's voter id and whether it solved the challenge, read afresh (the page
    accepts the terms and solves the challenge over HTTP after the socket opened)."""
    if not session_key:
        return "", False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return str(store.get(VOTER_SESSION_KEY) or ""), bool(store.get(CHALLENGE_SESSION_KEY))


class RedteamConsumer(ArenaSocket):
    async def connect(self) -> None:
        self.user_agent = header(self.scope, b"user-agent") or ""
        await super().connect()

    async def dispatch_frame(self, content: dict[str, Any]) -> None:
        kind = content.get("type")
        if kind == "start":
            await self._stop_turn()
            voter_id, verified = await db(_session)(self.session_key)
            player = Player(
                session_key=self.session_key,
                voter_id=voter_id,
                challenge_verified=verified,
                client_ip=self.client_ip,
                user_agent=self.user_agent,
            )
            attempt = await db(attempt_start)(
                player=player, challenge_slug=content.get("challenge")
            )
            await self._send({"type": "attempt_start", "attempt": attempt})
        elif kind == "turn":
            self._refuse_while_streaming()
            planned = await db(attempt_turn_add)(
                attempt_id=content.get("attempt_id"),
                session_key=self.session_key,
                prompt=content.get("prompt"),
                client_ip=self.client_ip,
            )
            if isinstance(planned, AttemptEnded):
                await self._send({"type": "attempt_end", "attempt": planned.attempt})
                return
            await self._send(
                {
                    "type": "turn_start",
                    "attempt_id": str(planned.attempt_id),
                    "turn": planned.turn,
                    "prompt": planned.prompt,
                }
            )
            self.turn_task = asyncio.create_task(self._run_turn(planned))
        elif kind == "surrender":
            await self._stop_turn()  # the answer in flight is saved (and judged) first
            attempt = await db(attempt_surrender)(
                attempt_id=content.get("attempt_id"), session_key=self.session_key
            )
            await self._send({"type": "attempt_end", "attempt": attempt})
        elif kind == "rejudge":
            self._refuse_while_streaming()
            outcome = await db(attempt_rejudge)(
                attempt_id=content.get("attempt_id"), session_key=self.session_key
            )
            await self._send_outcome(outcome)
        elif kind == "stop":
            await self._stop_turn()
        else:
            raise unknown_frame(kind)

    async def _send_outcome(self, outcome: TurnOutcome) -> None:
        await self._send({"type": "turn_end", "turn": outcome.turn, "attempt": outcome.attempt})
        if outcome.judge_failed:
            await self._send(judge_failed().as_frame())
        if outcome.ended:
            await self._send({"type": "attempt_end", "attempt": outcome.attempt})

    async def _run_turn(self, plan: TurnPlan) -> None:
        answer = Answer()

        async def on_delta(text: str) -> None:
            await self._send({"type": "deltas", "text": text})

        try:
            await self._stream(plan.target, plan.history, plan.max_tokens, answer, on_delta)
        finally:
            # Reached on completion, stop and disconnect alike: what was produced is saved, and
            # the idle clock starts when the turn ends, not at the last check that saw it
            # streaming.
            try:
                await self._finish_turn(plan, answer)
            finally:
                self._active()

    async def _finish_turn(self, plan: TurnPlan, answer: Answer) -> None:
        """Save (and judge) the turn, shielded so that a cancellation does not lose it halfway,
        and send its outcome."""
        if answer.status == "error":
            log.warning("red-teaming answer failed (%s): %s", plan.attempt_id, answer.error)
        saving = asyncio.ensure_future(db(attempt_turn_finish)(plan=plan, answer=answer))
        try:
            outcome = await asyncio.shield(saving)
        except asyncio.CancelledError:
            await asyncio.wait([saving])
            raise
        except Exception:
            log.exception("a red-teaming turn could not be saved")
            await self._send(server_error_frame())
        else:
            if answer.status == "error":
                await self._send(
                    ArenaError(
                        ErrorCode.ERROR,
                        answer.public_error or gettext("The model could not answer."),
                        status=502,
                    ).as_frame()
                )
            await self._send_outcome(outcome)
