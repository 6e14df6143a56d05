"""Liveness marks of streaming battles: which battles a running process is streaming now.

The process streaming a battle keeps a mark in the cache (Redis in production, shared by every
worker; in the demo's one process, its local memory) that lives ``ARENA_LIVE_OWNER_TTL_SECONDS``
and is refreshed while the turn streams (``arena.live.runtime.OwnerMarks``). A battle still
``streaming`` whose mark has lapsed belongs to a process that is gone (a killed web worker):
the next request for it settles it at once (``arena.live.sweep.live_battle_settle_orphan``)
instead of waiting for the sweep.
"""

import uuid
from collections.abc import Iterable

from django.conf import settings
from django.core.cache import caches

from arena.cache import FallbackRedisCache


def _key(battle_id: uuid.UUID) -> str:
    return f"arena:live-owner:{battle_id}"


def owners_mark(battle_ids: Iterable[uuid.UUID]) -> None:
    """Mark these battles as streaming in this process, for ``ARENA_LIVE_OWNER_TTL_SECONDS``."""
    marks = {_key(battle_id): 1 for battle_id in battle_ids}
    if marks:
        caches["default"].set_many(marks, timeout=settings.ARENA_LIVE_OWNER_TTL_SECONDS)


def owners_alive(battle_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """The battles among these that a live process marks as its own.

    While the Redis cache cannot be reached, every battle counts as alive: a missing mark then
    says nothing, and a battle streaming elsewhere must not be settled under its owner.
    """
    ids = list(battle_ids)
    if not ids:
        return set()
    backend = caches["default"]
    found = backend.get_many([_key(battle_id) for battle_id in ids])
    if isinstance(backend, FallbackRedisCache) and not backend.available:
        return set(ids)
    return {battle_id for battle_id in ids if _key(battle_id) in found}
