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
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext

from arena.code_tasks import suggestion_category
from arena.errors import ArenaError, ErrorCode
from arena.identity import session_hash
from arena.live.runtime import (
    TurnSave,
    db,
    owner_marks,
    progress_saver,
    retry_until_saved,
    save_unsaved,
)
from arena.live.sweep import live_battles_settle_orphans
from arena.live.turns import (
    TurnPlan,
    battle_mixed_stream,
    battle_regenerate,
    battle_start_live,
    battle_turn_add,
)
from arena.live.upstream import Answer
from arena.live.websocket import ArenaSocket, header, server_error_frame, unknown_frame
from arena.models import Battle
from arena.payloads import BattlePayload, ErrorFrame, Side
from arena.selectors import live_models_public, prompt_suggestion

log = logging.getLogger(__name__)

_FINISH_RETRY_SECONDS = 0.5


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


def turn_lost_frame() -> ErrorFrame:
    return ArenaError(
        ErrorCode.TURN_LOST,
        gettext(
            "The answers could not be saved yet (they will be once the database is back). "
            "Regenerate them, or start a new battle."
        ),
        status=503,
    ).as_frame()


class BattleConsumer(ArenaSocket):
    """The battle socket: admission, frame intake, the idle clock and the caps are the base's
    (``arena.live.websocket``); this answers the battle's frames and streams its turns."""

    def __init__(self, *args: Any, vote: CastVote | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # None: no vote frames (as_asgi(vote=...) gives it). Run in the process's one thread
        # for synchronous code, where the HTTP vote's view runs, not in the live battles' two
        # database threads, where it would queue behind every other battle's starts and saves
        # (bench/battles.py measured that at 50 visitors); wrapped once per socket.
        self.cast_vote_async: Any = None if vote is None else database_sync_to_async(vote)

    async def connect(self) -> None:
        self.lost: set[uuid.UUID] = set()  # battles whose last turn is not saved yet
        # Answer pieces not sent yet, by side, and the timer that sends them (_queue_delta).
        self.pending: dict[str, str] = {}
        self.flush_timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self.coalesce_seconds = max(0.0, settings.ARENA_DELTA_COALESCE_MS / 1000)
        await super().connect()

    def session_opened(self, session_key: str) -> None:
        # The session's battles left streaming by a worker that is gone are settled here, so a
        # page that reconnects finds them ended rather than streaming for minutes.
        live_battles_settle_orphans(session_hash=session_hash(session_key))

    async def dispatch_frame(self, content: dict[str, Any]) -> None:
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
            raise unknown_frame(kind)

    async def _vote(self, content: dict[str, Any], cast_vote: Any) -> None:
        """Answer a ``vote`` frame with ``voted``, or with an error frame saying it answers it
        (the page matches either to its vote by ``battle_id``). ``cast_vote``: the socket's
        ``CastVote``, wrapped to run in the thread for synchronous code."""
        battle_id = content.get("battle_id")
        try:
            battle = await cast_vote(
                session_key=self.session_key,
                client_ip=self.client_ip,
                user_agent=header(self.scope, b"user-agent"),
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
            self._hold(asyncio.get_running_loop().create_task(self._flush()))

    async def _flush(self) -> None:
        async with self.send_lock:
            await self._send_held()

    async def _send_held(self) -> None:
        """Send the buffered text as one ``deltas`` frame, ahead of any frame that follows it
        (the caller holds ``send_lock``)."""
        if self.flush_timer is not None:
            self.flush_timer.cancel()
            self.flush_timer = None
        if not self.pending:
            return
        pending, self.pending = self.pending, {}
        await self._send_text(json.dumps({"type": "deltas", **pending}))

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

        await self._stream(side_plan.target, side_plan.history, plan.max_tokens, answer, on_delta)
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
