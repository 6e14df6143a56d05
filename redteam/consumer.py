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

As the battle socket (``arena.live.consumer``): the session is the visitor's, the socket counts
against its address's socket cap, frames are bounded in size, and tokens go from this
consumer's own task straight to the socket; on ``stop`` or disconnect the upstream call is
cancelled and what was produced is saved (and judged).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from importlib import import_module
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext

from arena.api import VOTER_SESSION_KEY
from arena.errors import ArenaError, ErrorCode, still_streaming
from arena.inputs import json_parse
from arena.live.consumer import (
    CLOSE_TOO_BIG,
    CLOSE_TOO_MANY_SOCKETS,
    frame_too_large_frame,
    scope_language,
    server_error_frame,
    too_many_sockets_frame,
)
from arena.live.runtime import db, socket_counts
from arena.live.sockets import SocketTicket, socket_admit, socket_release
from arena.live.upstream import Answer, stream_answer
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


def _socket_open(session: Any, client_ip: str | None) -> tuple[str, SocketTicket | None]:
    session_key = ""
    if session is not None and getattr(session, "session_key", None):
        session.keys()  # loads it: a forged or expired key is cleared
        session_key = str(session.session_key or "")
    return session_key, socket_admit(client_ip)


class RedteamConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    channel_layer_alias = None  # nothing is sent to this socket from elsewhere

    async def connect(self) -> None:
        translation.activate(scope_language(self.scope))
        client = self.scope.get("client") or (None, None)
        self.client_ip: str | None = client[0]
        self.user_agent = ""
        for name, value in self.scope.get("headers") or []:
            if name == b"user-agent":
                self.user_agent = value.decode("latin-1")
        self.turn_task: asyncio.Task[None] | None = None
        self.connected = True
        self.send_lock = asyncio.Lock()
        self.max_frame_bytes: int = settings.ARENA_WS_MAX_FRAME_BYTES
        self.session_key, self.ticket = await db(_socket_open)(
            self.scope.get("session"), self.client_ip
        )
        await self.accept()
        if self.ticket is None:
            await self._send(too_many_sockets_frame())
            await self.close(code=CLOSE_TOO_MANY_SOCKETS)
            return
        socket_counts().add(self.ticket)

    async def disconnect(self, code: int) -> None:
        self.connected = False
        await self._stop_turn()
        ticket, self.ticket = self.ticket, None
        if ticket is not None:
            socket_counts().remove(ticket)
            await db(socket_release)(ticket)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Dispatch one frame; an ``ArenaError`` becomes its error frame, anything else is
        logged and answered with ``server_error``."""
        size = len(text_data or "") * 4 if text_data is not None else len(bytes_data or b"")
        if size > self.max_frame_bytes and (
            bytes_data is not None
            or len((text_data or "").encode("utf-8", "surrogatepass")) > self.max_frame_bytes
        ):
            await self._send(frame_too_large_frame())
            await self.close(code=CLOSE_TOO_BIG)
            return
        try:
            if text_data is None:
                raise ArenaError(
                    ErrorCode.INVALID_FRAME,
                    gettext("Frames are JSON text, not binary."),
                    field="frame",
                )
            content = json_parse(text_data, what="The frame", field="frame")
            if not isinstance(content, dict):
                raise ArenaError(ErrorCode.INVALID, gettext("Frames are JSON objects with a type."))
            await self._dispatch(content)
        except ArenaError as exc:
            await self._send(exc.as_frame())
        except Exception:
            log.exception("a red-teaming frame failed")
            await self._send(server_error_frame())

    async def _dispatch(self, content: dict[str, Any]) -> None:
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
            raise ArenaError(ErrorCode.INVALID, gettext("Unknown frame type."), field="type")

    def _refuse_while_streaming(self) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            raise still_streaming(status=400)

    async def _send(self, frame: Mapping[str, object]) -> None:
        if not self.connected:
            return
        text = json.dumps(frame)
        async with self.send_lock:
            try:
                await self.base_send({"type": "websocket.send", "text": text})
            except Exception:  # the socket went away; disconnect() does the cleanup
                self.connected = False

    async def _stop_turn(self) -> None:
        task, self.turn_task = self.turn_task, None
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

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
            await stream_answer(
                plan.target,
                plan.history,
                answer=answer,
                on_delta=on_delta,
                max_tokens=plan.max_tokens,
                deadline_seconds=settings.ARENA_LIVE_ANSWER_SECONDS,
            )
        finally:
            # Reached on completion, stop and disconnect alike: what was produced is saved,
            # shielded so that a cancellation does not lose it halfway.
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
