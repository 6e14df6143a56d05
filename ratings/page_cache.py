"""What the pages derive from a snapshot, computed once per snapshot and kept in the cache.

A leaderboard snapshot never changes, so whatever a page derives from it (one category and
style setting of the leaderboard, its charts, its downloads' bodies, a model's ratings and
record against each opponent, what /transparency lists) is computed on the first visit after
the snapshot is written and kept in the shared cache (Redis in production, local memory in the
demo; ``CACHES``) under the snapshot's id and creation time. A newer snapshot is a new key, so
nothing is ever invalidated: the old keys lapse after ``SNAPSHOT_CACHE_SECONDS``. A visit then
costs one query for the newest snapshot's head (``snapshot_head``: its id and a few columns,
not its payload) and a few cache reads, whatever the number of votes; the figures that need
the votes themselves (a model's record per opponent, the models served) are counted by the
rating task when it writes the snapshot (``payload["records"]``, ``payload["served"]``).

The id and the creation time together name a snapshot: a database that is reset reuses ids,
and a cache that outlives it (Redis) must not answer for the old rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar, cast

from django.core.cache import cache

from ratings.models import LeaderboardSnapshot

T = TypeVar("T")

#: How long a snapshot's pieces stay in the cache (a newer snapshot's keys replace them).
SNAPSHOT_CACHE_SECONDS = 7 * 24 * 3600
_KEY = "ratings:snapshot:v1:{pk}:{created}:{name}:{parts}"
_MISSING = object()


@dataclass(frozen=True)
class SnapshotHead:
    """The newest snapshot as a page names it: which one, when, and from how many votes."""

    pk: int
    created_at: datetime
    n_votes: int
    vote_high_water: int


def snapshot_head() -> SnapshotHead | None:
    """The newest snapshot's head, in one query that leaves the payload in the database."""
    row = (
        LeaderboardSnapshot.objects.order_by("-created_at", "-id")
        .values_list("id", "created_at", "n_votes", "vote_high_water")
        .first()
    )
    if row is None:
        return None
    return SnapshotHead(pk=row[0], created_at=row[1], n_votes=row[2], vote_high_water=row[3])


def snapshot_row(head: SnapshotHead) -> LeaderboardSnapshot:
    """The whole snapshot ``head`` names (a cache miss reads it once)."""
    return LeaderboardSnapshot.objects.get(pk=head.pk)


def snapshot_cached(
    head: SnapshotHead, name: str, parts: tuple[str, ...], compute: Callable[[], T]
) -> T:
    """``compute()`` for ``head``'s snapshot and ``parts``, from the cache after the first call.

    ``parts`` are what the piece depends on besides the snapshot (a category key, a style
    setting, a language); they are hashed, so a visitor's query string never makes a key long.
    """
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
    key = _KEY.format(pk=head.pk, created=head.created_at.timestamp(), name=name, parts=digest)
    kept = cache.get(key, _MISSING)
    if kept is not _MISSING:
        return cast(T, kept)
    value = compute()
    cache.set(key, value, SNAPSHOT_CACHE_SECONDS)
    return value
