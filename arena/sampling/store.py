"""Writing the active pair sampling's statistics (read by ``arena.sampling.stats``).

Called by the ratings side after each snapshot (``ratings.services.sampling_publish``): the
arena owns the format and the place, the ratings app only hands over the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from django.core.cache import cache

from arena.models import ArenaModel
from arena.sampling.stats import SAMPLING_STATS_KEY, StoredStats


def sampling_stats_store(
    *,
    snapshot_id: int,
    computed_at: datetime,
    se: Mapping[str, float],
    counts: Sequence[tuple[str, str, int]],
    established: Sequence[str] | None = None,
) -> None:
    """Keep a snapshot's standard errors, pair counts and established models (by slug) for the
    draws, by model id. ``established`` None (an older snapshot): the rated models stand in."""
    slugs = set(se) | {s for a, b, _ in counts for s in (a, b)} | set(established or ())
    ids = dict(ArenaModel.objects.filter(slug__in=slugs).values_list("slug", "id"))
    stored: StoredStats = {
        "snapshot_id": snapshot_id,
        "computed_at": computed_at.isoformat(),
        "se": {str(ids[slug]): float(value) for slug, value in se.items() if slug in ids},
        "counts": [[ids[a], ids[b], int(n)] for a, b, n in counts if a in ids and b in ids],
        "established": sorted(
            ids[slug] for slug in (se if established is None else established) if slug in ids
        ),
    }
    cache.set(SAMPLING_STATS_KEY, stored, timeout=None)
