"""The consumer's runtime: its database threads, the progress saver and the lost-turn saves.

State kept per process (per event loop) for every battle socket it serves, apart from the
consumer so that the consumer reads as the protocol: a small pool of database threads
(``db``), the saver that writes the partial answers of every streaming turn now and then
(``progress_saver``), and the ends of turns that could not be saved yet, held in memory and
saved again with back-off (``TurnSave``, ``retry_until_saved``, ``save_unsaved``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connections
from django.utils.translation import gettext

from arena.errors import ArenaError, ErrorCode
from arena.live.owners import owners_mark
from arena.live.sockets import SLOT_SECONDS, SocketTicket, current_slot, sockets_recount
from arena.live.turns import TurnPlan, battle_turn_finish, messages_progress
from arena.live.upstream import Answer
from arena.payloads import BattlePayload, Frame, Side

log = logging.getLogger(__name__)
T = TypeVar("T")


class FrameSender(Protocol):
    """The consumer, as the retry of a lost turn sees it: something that sends a frame."""

    async def _send(self, frame: Frame) -> None: ...


# Few threads: each one running ORM code holds the GIL against the event loop that relays the
# tokens, and the database (SQLite's one writer, PostgreSQL's connections) gains little from
# more. Two let a slow call (a start) overlap another without a convoy of runnable threads.
_DB_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="arena-db")


# How long a database thread keeps a connection it opened when the settings keep none
# (``CONN_MAX_AGE`` 0, production's default, right for request threads that come and go).
_KEEP_CONNECTION_SECONDS = 60.0
_kept = threading.local()  # per database thread: alias -> the connection given a longer life


def _keep_new_connections() -> None:
    """Give a connection this thread opened with no life (``CONN_MAX_AGE`` 0) one of
    ``_KEEP_CONNECTION_SECONDS``.

    The pool's threads are few and live as long as the process, so the connections they keep
    are few too (two per process); otherwise every start, turn end and partial save would open
    a PostgreSQL connection (a forked backend, a few ms of CPU on each side) and close it.
    Django's upkeep still closes a kept connection that failed or reached that age; a pooled
    connection (``OPTIONS["pool"]``) goes back to its pool after each call as Django does it.
    """
    kept: dict[str, object] = _kept.__dict__.setdefault("connections", {})
    for conn in connections.all(initialized_only=True):
        raw = conn.connection
        if raw is None or conn.settings_dict.get("CONN_MAX_AGE") != 0:
            continue
        if (conn.settings_dict.get("OPTIONS") or {}).get("pool") or kept.get(conn.alias) is raw:
            continue
        conn.close_at = time.monotonic() + _KEEP_CONNECTION_SECONDS
        kept[conn.alias] = raw


def db(func: Callable[..., T]) -> Callable[..., Any]:
    """``func`` run in a small pool of database threads, with Django's connection upkeep.

    ``database_sync_to_async`` alone runs every call of the process in one shared thread; with
    hundreds of battles, starting one waits behind every other battle's saves, and that thread's
    queue holds the GIL against the token relay. Nothing here needs thread affinity (each call
    is one self-contained service call, its transaction opened and closed inside it), so the
    calls run side by side, each thread on its own connection, which it keeps between calls.

    The wrapper is made once per function (``_db_wrapper``): every start, turn end and partial
    save of every battle asks for one, and building it (asgiref's checks, ``update_wrapper``)
    again each time is work for nothing.
    """
    return _db_wrapper(func)


@functools.lru_cache(maxsize=256)  # bounded: a caller passing a new closure each time evicts
def _db_wrapper(func: Callable[..., T]) -> Callable[..., Any]:
    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        finally:
            _keep_new_connections()  # before Channels' own upkeep closes a connection of age 0

    wrapped: Callable[..., Any] = database_sync_to_async(
        call, thread_sensitive=False, executor=_DB_POOL
    )
    return wrapped


def turn_finish(battle_id: uuid.UUID, answers: dict[Side, tuple[int, Answer]]) -> BattlePayload:
    """Save the turn's end and the battle as the page is shown it, in one thread hop."""
    return battle_turn_finish(battle_id=battle_id, answers=answers)


_SAVE_SLICE = 25  # messages per partial save
# After a turn is reported lost, its end is saved again with back-off (doubling from the first
# delay up to the longest) for at most the window; ``live_battles_sweep`` settles the battle if
# the process stops first, and a save that comes after the sweep changes nothing.
_SAVE_RETRY_FIRST_SECONDS = 1.0
_SAVE_RETRY_MAX_SECONDS = 15.0
_SAVE_RETRY_WINDOW_SECONDS = 600.0


class ProgressSaver:
    """Writes the partial answers of every turn streaming in this event loop, now and then.

    So that a crash loses seconds, not answers. One save (one thread hop, one transaction, one
    statement run for every message) per interval for all the turns of the process, only for
    sides whose text grew, rather than one per battle: at 500 battles that was 100 hops and
    transactions a second, each running ORM code in a database thread that holds the GIL
    against the event loop relaying the tokens. What was produced is saved in full at the end
    of each turn whatever happens here.
    """

    def __init__(self) -> None:
        self.turns: dict[int, tuple[TurnPlan, dict[Side, Answer], dict[Side, int]]] = {}
        self.task: asyncio.Task[None] | None = None

    def add(self, plan: TurnPlan, answers: dict[Side, Answer]) -> None:
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
                    await db(messages_progress)(contents={row[0]: row[1] for row in chunk})
                except Exception:
                    # Counted as saved only once written: the next round tries these again.
                    log.exception("saving partial answers failed")
                    continue
                for _, _, saved, side, parts in chunk:
                    saved[side] = parts


# One saver per event loop (tests run one loop per test; a server, one per process).
_SAVERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ProgressSaver] = (
    weakref.WeakKeyDictionary()
)


class TurnSave:
    """The end of one turn, held in memory (both answers in full) until it is saved.

    ``attempt`` saves it at most once, whoever asks: the consumer at the end of the turn, the
    retry with back-off after the page was told the turn was lost, or a ``regenerate`` or
    ``turn`` frame for that battle, which needs it saved first. The lock keeps them in order.
    """

    def __init__(self, plan: TurnPlan, answers: dict[Side, Answer]) -> None:
        self.battle_id = plan.battle_id
        self.answers = {s: (plan.sides[s].message_id, a) for s, a in answers.items()}
        self.lock = asyncio.Lock()
        self.payload: BattlePayload | None = None  # the battle as saved, once it is

    async def attempt(self) -> BattlePayload | None:
        """The saved battle's payload, saving it now if it is not yet; None if that failed."""
        async with self.lock:
            return await self.attempt_locked()

    async def attempt_locked(self) -> BattlePayload | None:
        if self.payload is None:
            try:
                self.payload = await db(turn_finish)(self.battle_id, self.answers)
            except Exception:
                log.exception("saving the end of a live turn failed (battle %s)", self.battle_id)
        return self.payload


# The turns of this event loop whose end is not saved yet, by battle id.
_UNSAVED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[uuid.UUID, TurnSave]] = (
    weakref.WeakKeyDictionary()
)
_RETRIES: set[asyncio.Task[None]] = set()  # strong references while they run


def unsaved_turns() -> dict[uuid.UUID, TurnSave]:
    return _UNSAVED.setdefault(asyncio.get_running_loop(), {})


async def save_unsaved(battle_id: object) -> None:
    """Save the end of this battle's lost turn, if this process holds one, before the battle is
    continued; an ``ArenaError`` while it still cannot be saved."""
    try:
        key = uuid.UUID(str(battle_id))
    except ValueError:
        return  # not a battle id: the service says so
    save = unsaved_turns().get(key)
    if save is None:
        return
    if await save.attempt() is None:
        raise ArenaError(
            ErrorCode.NOT_SAVED_YET,
            gettext("The last answers of this battle are not saved yet; try again in a moment."),
            status=503,
        )
    unsaved_turns().pop(key, None)


async def _retry_save(save: TurnSave, consumer: weakref.ref[FrameSender]) -> None:
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
        unsaved = unsaved_turns()
        if unsaved.get(save.battle_id) is save:
            del unsaved[save.battle_id]


class OwnerMarks:
    """Keeps the liveness marks (``arena.live.owners``) of the battles this event loop streams,
    and of those whose lost turn it still holds, refreshed until their turn has ended.

    One refresh (one thread hop, one cache write) every third of the marks' life for all of
    them. A mark is first set when the turn is planned, and left to lapse when it ends: the
    battle is then no longer streaming, and a mark says nothing about other battles.
    """

    def __init__(self) -> None:
        self.battles: dict[uuid.UUID, int] = {}  # battle id -> its turns streaming here
        self.task: asyncio.Task[None] | None = None

    def hold(self, battle_id: uuid.UUID) -> None:
        self.battles[battle_id] = self.battles.get(battle_id, 0) + 1
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def release(self, battle_id: uuid.UUID) -> None:
        left = self.battles.pop(battle_id, 0) - 1
        if left > 0:
            self.battles[battle_id] = left

    def owned(self) -> set[uuid.UUID]:
        return set(self.battles) | set(unsaved_turns())

    async def _run(self) -> None:
        interval = max(0.05, settings.ARENA_LIVE_OWNER_TTL_SECONDS / 3)
        while True:
            await asyncio.sleep(interval)
            owned = self.owned()
            if not owned:
                return
            try:
                await db(owners_mark)(owned)
            except Exception:
                log.exception("refreshing the liveness marks of live battles failed")


_OWNERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OwnerMarks] = (
    weakref.WeakKeyDictionary()
)


def owner_marks() -> OwnerMarks:
    return _of_this_loop(_OWNERS, OwnerMarks)


class SocketCounts:
    """The open sockets of this event loop, counted again in each new slot of their address's
    counts (``arena.live.sockets``) as it begins: one thread hop per slot for all of them."""

    def __init__(self) -> None:
        self.tickets: set[SocketTicket] = set()
        self.task: asyncio.Task[None] | None = None

    def add(self, ticket: SocketTicket) -> None:
        if not ticket.digest:
            return
        self.tickets.add(ticket)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, ticket: SocketTicket) -> None:
        self.tickets.discard(ticket)

    async def _run(self) -> None:
        while self.tickets:
            # Just past the start of the next slot, by the wall clock every process shares.
            await asyncio.sleep(SLOT_SECONDS - time.time() % SLOT_SECONDS + 0.01)
            try:
                await db(sockets_recount)(list(self.tickets), current_slot())
            except Exception:
                log.exception("counting the open battle sockets again failed")


_SOCKETS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SocketCounts] = (
    weakref.WeakKeyDictionary()
)


def socket_counts() -> SocketCounts:
    return _of_this_loop(_SOCKETS, SocketCounts)


def progress_saver() -> ProgressSaver:
    return _of_this_loop(_SAVERS, ProgressSaver)


_Kept = TypeVar("_Kept")


def _of_this_loop(
    kept: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Kept], make: Callable[[], _Kept]
) -> _Kept:
    """The running event loop's one ``make()`` in ``kept`` (made on first use; gone with the
    loop)."""
    loop = asyncio.get_running_loop()
    found = kept.get(loop)
    if found is None:
        found = kept[loop] = make()
    return found


def retry_until_saved(save: TurnSave, owner: FrameSender) -> None:
    """Hold a lost turn's end in memory and save it with back-off (``_retry_save``) until it
    lands; a ``regenerate`` or ``turn`` for its battle saves it first (``save_unsaved``)."""
    unsaved_turns()[save.battle_id] = save
    retry = asyncio.get_running_loop().create_task(_retry_save(save, weakref.ref(owner)))
    _RETRIES.add(retry)
    retry.add_done_callback(_RETRIES.discard)
