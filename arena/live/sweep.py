"""Settling live battles whose streaming process is gone: all of them after a while (the sweep,
run by a Celery beat task, ``arena.tasks.live_battles_sweep``), or one at once when its owner's
liveness mark has lapsed (``live_battle_settle_orphan``, called by the next request for it)."""

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from arena.live.owners import owners_alive
from arena.models import Battle, BattleMessage

T = TypeVar("T")


def _battle_settle_locked(battle: Battle) -> None:
    """Settle a streaming battle (its row locked by the caller): its unfinished answers become
    aborted, keeping the partial text saved so far, and the battle aborted, so the visitor can
    regenerate or start over."""
    BattleMessage.objects.filter(
        battle=battle,
        superseded_at__isnull=True,
        status=BattleMessage.Status.STREAMING,
    ).update(
        status=BattleMessage.Status.ABORTED,
        error="The server stopped before this answer ended.",
    )
    battle.state = Battle.State.ABORTED
    battle.save(update_fields=["state", "updated_at"])


def live_battles_sweep(*, now: datetime | None = None) -> int:
    """Settle battles left streaming by a server that stopped mid-turn (a crash, a restart, a
    turn whose end could not be saved), keeping the partial text.

    Only battles older than the longest an answer may take (``ARENA_LIVE_ANSWER_SECONDS``) and
    a minute's margin: a live server has ended every turn by then. Returns how many it settled.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.ARENA_LIVE_ANSWER_SECONDS + 60)
    settled = 0
    stale = Battle.objects.filter(state=Battle.State.STREAMING, updated_at__lt=cutoff)
    for battle_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            battle = (
                Battle.objects.select_for_update()
                .filter(pk=battle_id, state=Battle.State.STREAMING, updated_at__lt=cutoff)
                .first()
            )
            if battle is None:  # its turn ended meanwhile
                continue
            _battle_settle_locked(battle)
            settled += 1
    return settled


def battle_orphaned(battle: Battle) -> bool:
    """Whether a streaming battle has no live owner: no process has marked it alive within
    ``ARENA_LIVE_OWNER_TTL_SECONDS`` (``arena.live.owners``), and its turn began longer ago
    than that (a turn planned just now may not be marked yet)."""
    if battle.state != Battle.State.STREAMING:
        return False
    ttl = settings.ARENA_LIVE_OWNER_TTL_SECONDS
    if battle.updated_at is not None and battle.updated_at > timezone.now() - timedelta(
        seconds=ttl
    ):
        return False
    return battle.pk not in owners_alive([battle.pk])


def live_battle_settle_orphan(*, battle_id: uuid.UUID) -> bool:
    """Settle one battle at once, as the sweep does, if it is still streaming and its owner is
    gone (a killed web worker); whether it did. Under the battle's row lock."""
    with transaction.atomic():
        battle = (
            Battle.objects.select_for_update(of=("self",))
            .filter(pk=battle_id, state=Battle.State.STREAMING)
            .first()
        )
        if battle is None or not battle_orphaned(battle):
            return False
        _battle_settle_locked(battle)
        return True


def live_battles_settle_orphans(*, session_hash: str) -> int:
    """Settle the battles of one session left streaming by an owner that is gone (a socket's
    reconnect finds them); how many it settled."""
    if not session_hash:
        return 0
    streaming = list(
        Battle.objects.filter(
            session_hash=session_hash,
            source__in=(Battle.Source.LIVE, Battle.Source.MIXED),
            state=Battle.State.STREAMING,
        ).values_list("pk", flat=True)
    )
    if not streaming:
        return 0
    alive = owners_alive(streaming)
    return sum(
        live_battle_settle_orphan(battle_id=battle_id)
        for battle_id in streaming
        if battle_id not in alive
    )


class BattleOrphaned(Exception):
    """Raised inside a service's transaction for a battle found streaming with no live owner
    (``orphan_check``); ``settling_orphans`` settles it and makes the call again."""

    def __init__(self, battle_id: uuid.UUID) -> None:
        super().__init__(battle_id)
        self.battle_id = battle_id


def orphan_check(battle: Battle) -> None:
    """``BattleOrphaned`` if this battle (read under its row lock) is orphaned."""
    if battle_orphaned(battle):
        raise BattleOrphaned(battle.pk)


def settling_orphans(call: Callable[[], T]) -> T:
    """``call()``; when it finds its battle orphaned, the battle settled as the sweep does (in a
    transaction of its own, so that what the call then refuses does not undo it) and ``call()``
    made again, which goes on from the settled battle."""
    try:
        return call()
    except BattleOrphaned as orphan:
        live_battle_settle_orphan(battle_id=orphan.battle_id)
        return call()
