"""The active pair sampling in force: its switch, its floor, the stored statistics it reads.

The rule itself is ``arena.sampling.rule`` (plain Python). It needs, from the latest leaderboard
snapshot, each model's standard error and each pair's battle count. The arena never imports the
ratings app, so the ratings side hands them over: after a snapshot commits (and on each sweep,
should the entry be gone) ``ratings.services.sampling_publish`` calls
``arena.sampling.store.sampling_stats_store`` with the snapshot's figures, keyed by model
slug (and the models established in that view, which mixed battles stop bridging:
``arena.services.bridge``); that service maps slugs to ids and keeps one JSON entry in the
shared cache (Redis in production) under ``SAMPLING_STATS_KEY``, with no expiry. A cache is enough: the entry is a pure
function of the latest snapshot, rewritten after every one, and while it is missing (a cache
flush; no snapshot yet) the active rule sees every pair alike, so the draw follows the
sampling weights (with the floor).

Settings: ``ARENA_ACTIVE_SAMPLING`` (on by default) and ``ARENA_SAMPLING_FLOOR`` (share of the
draws spread evenly over every pair, 0.2 by default). With the switch off the draw is the
arena's original one: the first model by sampling weight, the second by weight among the rest
(``arena.services.battles``, ``arena.live.draw``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired, TypedDict, cast

from django.conf import settings
from django.core.cache import cache
from django.utils.dateparse import parse_datetime

from arena.sampling.rule import SamplingStats, pair_probabilities

logger = logging.getLogger(__name__)

SAMPLING_STATS_KEY = "arena:sampling-stats:v1"


class StoredStats(TypedDict):
    snapshot_id: int
    computed_at: str  # ISO 8601, the snapshot's creation time
    se: dict[str, float]  # model id (as JSON keys are strings) -> standard error, rating points
    counts: list[list[int]]  # [model id, model id, battles]
    # Model ids rated and not preliminary in the snapshot's sampling view (absent in an entry
    # written before it was kept: then the rated models, the keys of ``se``, stand in).
    established: NotRequired[list[int]]


@dataclass(frozen=True)
class SamplingPolicy:
    """The policy in force, as the transparency page shows it."""

    active: bool
    floor: float
    snapshot_id: int | None  # the snapshot the statistics come from; None when there are none
    computed_at: datetime | None


def sampling_active() -> bool:
    return bool(settings.ARENA_ACTIVE_SAMPLING)


def sampling_floor() -> float:
    return min(max(float(settings.ARENA_SAMPLING_FLOOR), 0.0), 1.0)


def _stored() -> StoredStats | None:
    try:
        value: Any = cache.get(SAMPLING_STATS_KEY)
    except Exception:
        # A cache outage must not stop battles: the draw falls back to the weights.
        logger.exception("arena: could not read the sampling statistics")
        return None
    return cast(StoredStats, value) if isinstance(value, dict) else None


def sampling_stats_snapshot_id() -> int | None:
    """The snapshot the stored statistics come from (None when there are none)."""
    stored = _stored()
    return None if stored is None else int(stored["snapshot_id"])


def sampling_stats() -> SamplingStats | None:
    stored = _stored()
    if stored is None:
        return None
    return SamplingStats(
        se={int(k): float(v) for k, v in stored["se"].items()},
        counts={(int(a), int(b)): int(n) for a, b, n in stored["counts"]},
    )


def established_models() -> frozenset[int] | None:
    """The models (by id) the latest snapshot rates with at least ``RATINGS_ESTABLISHED_MIN_VOTES``
    votes on the connected board; every other model is preliminary, not connected or new. None
    while no statistics are stored (no snapshot yet, a cache flush): nothing is known."""
    stored = _stored()
    if stored is None:
        return None
    established = stored.get("established")
    if established is None:
        return frozenset(int(k) for k in stored["se"])
    return frozenset(int(pk) for pk in established)


def sampling_policy() -> SamplingPolicy:
    stored = _stored()
    return SamplingPolicy(
        active=sampling_active(),
        floor=sampling_floor(),
        snapshot_id=None if stored is None else int(stored["snapshot_id"]),
        computed_at=None if stored is None else parse_datetime(stored["computed_at"]),
    )


def pair_probabilities_now(weights: Mapping[int, float]) -> dict[tuple[int, int], float]:
    """Each pair's probability under the policy in force, for models (by id) and weights.

    With active sampling off this is the original draw's pair probability: first by weight,
    second by weight among the rest, either order.
    """
    if sampling_active():
        return pair_probabilities_active(weights)
    positive = {m: w for m, w in weights.items() if w > 0}
    total = sum(positive.values())
    models = list(positive)
    return {
        (a, b): positive[a] / total * positive[b] / (total - positive[a])
        + positive[b] / total * positive[a] / (total - positive[b])
        for i, a in enumerate(models)
        for b in models[i + 1 :]
    }


def pair_probabilities_active(weights: Mapping[int, float]) -> dict[tuple[int, int], float]:
    """Each pair's probability under the active rule, for models (by id) and their weights."""
    return pair_probabilities(weights, sampling_stats(), floor=sampling_floor())
