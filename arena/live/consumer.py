"""The live battle websocket: one socket per battle page, one turn streaming at a time.

Why one module: the consumer is one object whose state (the socket, the turn in flight, its
streaming tasks and the frames buffered for the page) every frame handler reads and changes; the
services it calls live elsewhere (``arena.live.turns``, ``arena.live.runtime``, and the vote
it is given, ``arena.visitor_api.vote_over_socket``).

Frames from the page (JSON objects with a ``type``):

- ``start``       {prompt, mode?: "anonymous"|"named", models?: [slug_a, slug_b], images?: [id]}
                  images: the session's uploads (``POST /api/images``), for vision models
- ``turn``        {battle_id, prompt}      a follow-up with the same pair (no new images)
- ``regenerate``  {battle_id}              new answers to the last turn
- ``stream``      {battle_id}              a mixed battle's live side: its next pool turn, or
                  again the turn its answer failed on (``arena.services.bridge``); the
                  battle's ``turn_end`` says ``streaming`` while turns are left to answer
- ``stop``        {}                       cancel the turn that is streaming
- ``models``      {}                       the models named mode may pick from
- ``suggest``     {category?: "code"}      a prompt from the pool; "code" (Code mode): a
                  programming task whose answers run in the browser
- ``vote``        {battle_id, winner, ran?} the vote ``POST /api/battles/<id>/vote`` takes,
                  with the same checks in the same order: the per-address rate limit (counted
                  with the HTTP votes'), the challenge and the voter id read fresh from the
                  session (the terms or the challenge may be done after the socket opened),
                  the daily caps (``arena.services.votes.vote_cast``)

Frames to the page:

- ``turn_start``  {battle, turn, prompt, regenerated}
- ``deltas``      {a?, b?}                 the next pieces of the sides' answers, by side (only
                  sides with text); appended in order, they make each answer. Pieces are
                  buffered per socket for ``ARENA_DELTA_COALESCE_MS`` (0: until the next
                  event-loop iteration) from the first, so two sides streaming together share
                  frames; any buffered text is sent before every other frame
- ``side_end``    {side, status, error}    status done|error|aborted; error is a public message
- ``turn_end``    {battle}                 saved state; ``battle.votable`` unlocks voting
- ``voted``       {battle}                 the answer to a ``vote``: the battle as the HTTP vote
                  answers it, the models named
- ``models``      {models}, ``suggestion`` {prompt}
- ``error``       {code, message, field}   an ``ArenaError``, made into a frame in one place;
                  ``server_error`` for anything unexpected (logged with its traceback);
                  ``turn_lost`` when the end of a turn could not be saved yet: the answers
                  stay in memory and the save is retried (a ``turn_end`` follows once it
                  lands), and a ``regenerate`` or ``turn`` for that battle saves it first.
                  The error answering a ``vote`` frame adds ``reply_to: "vote"`` and the
                  ``battle_id`` it named (the HTTP vote's codes: rate_limited, challenge_required,
                  terms_required, vote_cap, already_voted, not_votable, not_found, invalid,
                  server_error)

Model names appear only in ``models`` frames (asked for by named mode), in the battle of a
named-mode turn and in ``voted``: the vote that reveals an anonymous pair goes over this socket
while it is open (one request less per battle), else over HTTP as for pool battles.
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
from typing import Any, Protocol

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import HttpRequest
from django.utils import translation
from django.utils.translation import gettext

from arena.code_tasks import suggestion_category
from arena.errors import ArenaError, ErrorCode, server_error, still_streaming
from arena.identity import session_hash
from arena.inputs import json_parse
from arena.live.runtime import (
    TurnSave,
    db,
    owner_marks,
    progress_saver,
    retry_until_saved,
    save_unsaved,
    socket_counts,
)
from arena.live.sockets import SocketTicket, socket_admit, socket_release
from arena.live.sweep import live_battles_settle_orphans
from arena.live.turns import (
    TurnPlan,
    battle_mixed_stream,
    battle_regenerate,
    battle_start_live,
    battle_turn_add,
)
from arena.live.upstream import Answer, stream_answer
from arena.models import Battle
from arena.payloads import BattlePayload, ErrorFrame, Frame, Side
from arena.selectors import live_models_public, prompt_suggestion

log = logging.getLogger(__name__)

_FINISH_RETRY_SECONDS = 0.5


def _session_key(session: Any) -> str:
    """The scope's session key, if it names a live session (a forged or expired cookie does not).

    Loading the session (from the cache or the database, by its backend) clears its key when no
    unexpired session has it, as Django's own session middleware finds it.
    """
    if session is None or not getattr(session, "session_key", None):
        return ""
    session.keys()  # loads it
    return str(session.session_key or "")


def _socket_open(session: Any, client_ip: str | None) -> tuple[str, SocketTicket | None]:
    """A new socket's session key and its place in its address's socket count (None: over the
    cap). The session's battles left streaming by a worker that is gone are settled here, so a
    page that reconnects finds them ended rather than streaming for minutes."""
    session_key = _session_key(session)
    if session_key:
        live_battles_settle_orphans(session_hash=session_hash(session_key))
    return session_key, socket_admit(client_ip)


class CastVote(Protocol):
    """What answers a ``vote`` frame: ``arena.visitor_api.vote_over_socket``, given to the
    consumer by ``arena.routing`` (the votes' services sit above ``arena.live`` in the imports,
    which the consumer does not cross). Raises an ``ArenaError`` as the HTTP vote does."""

    def __call__(
        self,
        *,
        session_key: str,
        client_ip: str | None,
        user_agent: str | None,
        interface_language: str,
        battle_id: object,
        winner: object,
        ran: object,
    ) -> BattlePayload: ...


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return str(value.decode("latin-1"))  # as Django's ASGI request reads headers
    return None


# Close codes, in the range kept for applications (4000-4999), after the last 3 digits of the
# matching HTTP status; 1009 (message too big) is the protocol's own.
CLOSE_TOO_MANY_SOCKETS = 4429
CLOSE_IDLE = 4408
CLOSE_TOO_BIG = 1009


# The socket's fixed error frames, built when sent so that they are in the socket's language.
def server_error_frame() -> ErrorFrame:
    return server_error().as_frame()


def frame_too_large_frame() -> ErrorFrame:
    return ArenaError(
        ErrorCode.REQUEST_TOO_LARGE, gettext("The frame is too large."), status=413, field="frame"
    ).as_frame()


def too_many_sockets_frame() -> ErrorFrame:
    return ArenaError(
        ErrorCode.TOO_MANY_SOCKETS,
        gettext("Too many arena pages are open from your network; close some and reload this one."),
        status=429,
    ).as_frame()


def turn_lost_frame() -> ErrorFrame:
    return ArenaError(
        ErrorCode.TURN_LOST,
        gettext(
            "The answers could not be saved yet (they will be once the database is back). "
            "Regenerate them, or start a new battle."
        ),
        status=503,
    ).as_frame()


def scope_language(scope: dict[str, Any]) -> str:
    """The language a page's socket speaks: as LocaleMiddleware chooses it for a request (the
    language cookie, else Accept-Language, else LANGUAGE_CODE), from the handshake's cookies
    (channels' CookieMiddleware, in the session stack) and headers."""
    request = HttpRequest()
    request.COOKIES = dict(scope.get("cookies") or {})
    for name, value in scope.get("headers") or []:
        if name == b"accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = value.decode("latin-1")
    return translation.get_language_from_request(request)


class BattleConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    # Nothing is sent to a battle socket from elsewhere, so it does not subscribe to the channel
    # layer: no Redis connection held in a blocking receive per open socket.
    channel_layer_alias = None

    def __init__(self, *args: Any, vote: CastVote | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # None: no vote frames (as_asgi(vote=...) gives it). Run in the process's one thread
        # for synchronous code, where the HTTP vote's view runs, not in the live battles' two
        # database threads, where it would queue behind every other battle's starts and saves
        # (bench/battles.py measured that at 50 visitors); wrapped once per socket.
        self.cast_vote_async: Any = None if vote is None else database_sync_to_async(vote)

    async def connect(self) -> None:
        # Every frame this socket sends (error messages) is in the page's language: activated
        # in the consumer's own task, whose context its turn tasks and database threads copy.
        translation.activate(scope_language(self.scope))
        # The peer's address as the ASGI server reports it (behind a proxy, the server's
        # --forwarded-allow-ips makes it the visitor's): the key of the live-call rate limit
        # and of the socket cap.
        client = self.scope.get("client") or (None, None)
        self.client_ip: str | None = client[0]
        self.ticket: SocketTicket | None = None
        self.turn_task: asyncio.Task[None] | None = None
        self.lost: set[uuid.UUID] = set()  # battles whose last turn is not saved yet
        self.connected = True
        # Answer pieces not sent yet, by side, and the timer that sends them (_queue_delta).
        self.pending: dict[str, str] = {}
        self.flush_timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self.flush_tasks: set[asyncio.Task[None]] = set()
        self.send_lock = asyncio.Lock()
        self.coalesce_seconds = max(0.0, settings.ARENA_DELTA_COALESCE_MS / 1000)
        self.max_frame_bytes: int = settings.ARENA_WS_MAX_FRAME_BYTES
        self.idle_seconds: float = settings.ARENA_WS_IDLE_SECONDS
        self.idle_timer: asyncio.TimerHandle | None = None
        # The session is loaded here, in the consumer's database threads (config/asgi.py: the
        # socket's stack loads no user, which nothing here reads), with the socket counted.
        self.session_key, self.ticket = await db(_socket_open)(
            self.scope.get("session"), self.client_ip
        )
        await self.accept()
        if self.ticket is None:
            # Accepted first so that the page reads why before the close.
            await self._send(too_many_sockets_frame())
            await self.close(code=CLOSE_TOO_MANY_SOCKETS)
            return
        socket_counts().add(self.ticket)
        self._active()

    async def disconnect(self, code: int) -> None:
        self.connected = False
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        await self._stop_turn()
        ticket, self.ticket = self.ticket, None
        if ticket is not None:
            socket_counts().remove(ticket)
            await db(socket_release)(ticket)

    # --- the idle timeout -------------------------------------------------------------------
    # A socket with no frame from the page and no turn streaming for ``ARENA_WS_IDLE_SECONDS``
    # is closed (CLOSE_IDLE); the page opens a new one when it next sends a frame.
    def _active(self) -> None:
        self.active_at = asyncio.get_running_loop().time()
        if self.idle_timer is None and self.idle_seconds > 0 and self.connected:
            self.idle_timer = asyncio.get_running_loop().call_later(
                self.idle_seconds, self._idle_due
            )

    def _idle_due(self) -> None:
        loop = asyncio.get_running_loop()
        self.idle_timer = None
        if not self.connected:
            return
        if self.turn_task is not None and not self.turn_task.done():
            self.active_at = loop.time()  # streaming is not idling
        left = self.active_at + self.idle_seconds - loop.time()
        if left > 0:
            self.idle_timer = loop.call_later(left, self._idle_due)
            return
        task = loop.create_task(self._close_idle())
        self.flush_tasks.add(task)  # held until done (the loop keeps only weak references)
        task.add_done_callback(self.flush_tasks.discard)

    async def _close_idle(self) -> None:
        if self.connected:
            await self.close(code=CLOSE_IDLE)

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
        self._active()
        if self._too_big(text_data, bytes_data):
            # Refused unread: the largest frame the page sends is far smaller (a start with the
            # longest prompt allowed), and parsing megabytes of JSON would hold the event loop.
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
            await self._dispatch(content)
        except ArenaError as exc:
            await self._send(exc.as_frame())
        except Exception:
            log.exception("a websocket frame failed")
            await self._send(server_error_frame())

    async def _dispatch(self, content: Any) -> None:
        if not isinstance(content, dict):
            raise ArenaError(ErrorCode.INVALID, gettext("Frames are JSON objects with a type."))
        kind = content.get("type")
        if kind == "start":
            await self._stop_turn()  # a new battle replaces one still streaming here
            for battle_id in list(self.lost):  # they count against the session's streaming
                with contextlib.suppress(ArenaError):
                    await save_unsaved(battle_id)
                    self.lost.discard(battle_id)
            plan = await db(battle_start_live)(
                session_key=self.session_key,
                prompt=content.get("prompt"),
                mode=content.get("mode") or Battle.Mode.ANONYMOUS,
                model_slugs=content.get("models"),
                client_ip=self.client_ip,
                image_ids=content.get("images"),
            )
            await self._begin(plan)
        elif kind == "turn":
            self._refuse_while_streaming()
            await save_unsaved(content.get("battle_id"))
            plan = await db(battle_turn_add)(
                battle_id=content.get("battle_id"),
                session_key=self.session_key,
                prompt=content.get("prompt"),
                client_ip=self.client_ip,
                image_ids=content.get("images"),
            )
            await self._begin(plan)
        elif kind == "regenerate":
            self._refuse_while_streaming()
            # A turn reported lost is saved first, so its answers are kept (superseded) and the
            # battle is no longer streaming: regenerate works as soon as the page hears of it.
            await save_unsaved(content.get("battle_id"))
            plan = await db(battle_regenerate)(
                battle_id=content.get("battle_id"),
                session_key=self.session_key,
                client_ip=self.client_ip,
            )
            await self._begin(plan)
        elif kind == "stream":
            self._refuse_while_streaming()
            await save_unsaved(content.get("battle_id"))
            plan = await db(battle_mixed_stream)(
                battle_id=content.get("battle_id"),
                session_key=self.session_key,
                client_ip=self.client_ip,
            )
            await self._begin(plan)
        elif kind == "vote" and self.cast_vote_async is not None:
            await self._vote(content, self.cast_vote_async)
        elif kind == "stop":
            await self._stop_turn()
        elif kind == "models":
            models = await db(live_models_public)()
            await self._send({"type": "models", "models": models})
        elif kind == "suggest":
            category = suggestion_category(content.get("category", ""))
            prompt = await db(prompt_suggestion)(category=category)
            await self._send({"type": "suggestion", "prompt": prompt})
        else:
            if isinstance(kind, str) and len(kind) <= 40:
                message = gettext("Unknown frame type %(type)s.") % {"type": repr(kind)}
            else:
                message = gettext("Unknown frame type.")
            raise ArenaError(ErrorCode.INVALID, message, field="type")

    async def _vote(self, content: dict[str, Any], cast_vote: Any) -> None:
        """Answer a ``vote`` frame with ``voted``, or with an error frame saying it answers it
        (the page matches either to its vote by ``battle_id``). ``cast_vote``: the socket's
        ``CastVote``, wrapped to run in the thread for synchronous code."""
        battle_id = content.get("battle_id")
        try:
            battle = await cast_vote(
                session_key=self.session_key,
                client_ip=self.client_ip,
                user_agent=_header(self.scope, b"user-agent"),
                interface_language=translation.get_language() or "",
                battle_id=battle_id,
                winner=content.get("winner"),
                ran=content.get("ran"),
            )
        except Exception as exc:
            if isinstance(exc, ArenaError):
                frame = exc.as_frame()
            else:
                log.exception("a vote over the websocket failed")
                frame = server_error_frame()
            frame["reply_to"] = "vote"
            if isinstance(battle_id, str) and len(battle_id) <= 64:
                frame["battle_id"] = battle_id
            await self._send(frame)
            return
        await self._send({"type": "voted", "battle": battle})

    def _too_big(self, text: str | None, data: bytes | None) -> bool:
        """Whether a frame is over ``ARENA_WS_MAX_FRAME_BYTES`` (UTF-8 bytes, as on the wire)."""
        limit = self.max_frame_bytes
        if data is not None and len(data) > limit:
            return True
        if text is None or len(text) * 4 <= limit:  # 4 bytes a character at most
            return False
        return len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit

    def _refuse_while_streaming(self) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            raise still_streaming(status=400)

    async def _send(self, frame: Frame) -> None:
        """Send one frame, after any answer text still buffered (which it must follow)."""
        text = json.dumps(frame)
        async with self.send_lock:
            await self._send_pending()
            await self._send_text(text)

    # Each frame costs the server ~90 us to send whatever its size, and both sides' pieces
    # arrive at nearly the same moments: they are buffered and sent together, one frame per
    # coalescing window instead of one per piece. All frames go out under ``send_lock``, so
    # buffered text always precedes the frame that follows it (``side_end``, ``turn_end``,
    # an error). What is saved comes from the upstream ``Answer``, never from these frames.
    def _queue_delta(self, side: str, text: str) -> None:
        pending = self.pending
        pending[side] = pending.get(side, "") + text
        if self.flush_timer is None:
            loop = asyncio.get_running_loop()
            if self.coalesce_seconds > 0:
                self.flush_timer = loop.call_later(self.coalesce_seconds, self._flush_due)
            else:
                self.flush_timer = loop.call_soon(self._flush_due)

    def _flush_due(self) -> None:
        self.flush_timer = None
        if self.pending:
            task = asyncio.get_running_loop().create_task(self._flush())
            self.flush_tasks.add(task)  # held until done (the loop keeps only weak references)
            task.add_done_callback(self.flush_tasks.discard)

    async def _flush(self) -> None:
        async with self.send_lock:
            await self._send_pending()

    async def _send_pending(self) -> None:
        """Send the buffered text as one ``deltas`` frame (the caller holds ``send_lock``)."""
        if self.flush_timer is not None:
            self.flush_timer.cancel()
            self.flush_timer = None
        if not self.pending:
            return
        pending, self.pending = self.pending, {}
        await self._send_text(json.dumps({"type": "deltas", **pending}))

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
        progress = progress_saver()
        progress.add(plan, answers)
        owners = owner_marks()
        owners.hold(plan.battle_id)
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
            try:
                await self._finish_turn(plan, answers)
            finally:  # a lost turn stays marked while its end is held (runtime.unsaved_turns)
                owners.release(plan.battle_id)
                # The idle clock starts when the turn ends, not at the last check that saw it
                # streaming (which may have been almost ARENA_WS_IDLE_SECONDS ago).
                self._active()

    async def _finish_turn(self, plan: TurnPlan, answers: dict[Side, Answer]) -> None:
        """Save the turn's end and send it; a failed save is retried once, then reported.

        Without a ``turn_end`` the page would wait for ever; on a second failure it is told the
        turn was lost (for now): the answers stay in memory and their save is retried with
        back-off (``runtime.retry_until_saved``) until the database is back, and a
        ``regenerate`` or ``turn`` for the battle saves them first. Only if this process stops
        before that does ``live_battles_sweep`` settle the battle, with the last partial texts.
        """
        save = TurnSave(plan, answers)
        for attempt in (1, 2):
            payload = await save.attempt()
            if payload is not None:
                await self._send({"type": "turn_end", "battle": payload})
                return
            if attempt == 1:
                await asyncio.sleep(_FINISH_RETRY_SECONDS)
        retry_until_saved(save, self)
        self.lost.add(plan.battle_id)
        await self._send(turn_lost_frame())

    async def _run_side(self, plan: TurnPlan, side: Side, answer: Answer) -> None:
        side_plan = plan.sides[side]
        queue_delta = self._queue_delta

        async def on_delta(text: str) -> None:
            queue_delta(side, text)

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
