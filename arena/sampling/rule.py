"""Active pair sampling: which two models the next battle shows, as probabilities over pairs.

The rule is the Chatbot Arena paper's (Chiang et al. 2024, section 5.2, "active sampling"):
the next pair ``(a, b)`` is drawn with probability proportional to how much one more battle of
that pair narrows the interval of the pair's estimate,

    v(a, b) = sqrt(S_ab / n_ab) - sqrt(S_ab / (n_ab + 1)),

where ``n_ab`` is the number of rated battles between ``a`` and ``b`` and ``S_ab / n_ab`` is the
current variance of the estimate. Here the estimate is the pair's rating difference, and its
variance is read from the latest leaderboard snapshot: each model's 95% interval gives a
standard error ``se = (upper - lower) / (2 * 1.96)``, and ``Var(r_a - r_b) ~ se_a^2 + se_b^2``
(the covariance is not in the snapshot; leaving it out overstates the variance of well-connected
pairs a little, the same for every pair of a model). So ``S_ab = n_ab * Var`` and
``v = sd_ab * (1 - sqrt(n_ab / (n_ab + 1)))``; a pair that never met (``n_ab = 0``) has
``v = sd_ab``, the most any pair can get, so new pairs are met early. A model the snapshot did not
rate (new, or provisional) takes the largest standard error known, so its pairs rank first.

The active part is mixed with the models' sampling weights and a floor::

    q(a, b) = w_a * w_b * v(a, b) / sum(...)
    p(a, b) = (1 - floor) * q(a, b) + floor / n_pairs

so every pair of available models keeps at least ``floor / n_pairs`` of the draws whatever the
snapshot says (the estimate of ``v`` is stale between snapshots, and a pair must never starve).

This module is plain Python (no Django, no I/O): ``arena.sampling.stats`` reads the stored
statistics the rule draws from, and the ratings side computes them after each snapshot and hands
them over through ``arena.sampling.store``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

#: z of a two-sided 95% interval: the snapshot's intervals are 95% ones.
Z95 = 1.959963984540054


@dataclass(frozen=True)
class SamplingStats:
    """What the active rule needs from a snapshot: per-model standard errors (rating points)
    and per-pair battle counts, keyed by whatever identifies a model (id or slug)."""

    se: Mapping[Hashable, float]
    counts: Mapping[tuple[Hashable, Hashable], int]

    def n(self, a: Hashable, b: Hashable) -> int:
        return int(self.counts.get((a, b), 0) or self.counts.get((b, a), 0))


def se_from_interval(lower: float, upper: float) -> float:
    return max(0.0, (upper - lower) / (2 * Z95))


def variance_reduction(variance: float, n: int) -> float:
    """``sqrt(S/n) - sqrt(S/(n+1))`` with ``S = n * variance``; ``sqrt(variance)`` when ``n = 0``."""
    sd = math.sqrt(max(variance, 0.0))
    if n <= 0:
        return sd
    return sd * (1.0 - math.sqrt(n / (n + 1)))


def pair_probabilities(
    weights: Mapping[K, float], stats: SamplingStats | None, *, floor: float
) -> dict[tuple[K, K], float]:
    """Probability of each unordered pair of the models in ``weights`` (positive weights only).

    Pairs are keyed ``(a, b)`` in the order of ``weights``. Without ``stats`` (no snapshot yet)
    every pair has the same ``v``, so the draw is by the product of the weights alone.
    """
    models = [m for m, w in weights.items() if w > 0]
    pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
    if not pairs:
        return {}
    floor = min(max(floor, 0.0), 1.0)
    if stats is not None and stats.se:
        default_se = max(stats.se.values())
        se = {m: stats.se.get(m, default_se) for m in models}
        active = {
            (a, b): variance_reduction(se[a] ** 2 + se[b] ** 2, stats.n(a, b)) for a, b in pairs
        }
    else:
        active = dict.fromkeys(pairs, 1.0)
    raw = {(a, b): weights[a] * weights[b] * active[(a, b)] for a, b in pairs}
    total = sum(raw.values())
    if total <= 0 or not math.isfinite(total):
        # Every interval is zero-width (or no snapshot knows these models): weights alone.
        raw = {(a, b): weights[a] * weights[b] for a, b in pairs}
        total = sum(raw.values())
    share = floor / len(pairs)
    return {pair: (1.0 - floor) * value / total + share for pair, value in raw.items()}


def draw_pair(probabilities: Mapping[tuple[K, K], float], rng: random.Random) -> tuple[K, K]:
    """One pair drawn by ``probabilities``, its two models in random order."""
    pairs: Sequence[tuple[K, K]] = list(probabilities)
    a, b = rng.choices(pairs, weights=[probabilities[p] for p in pairs], k=1)[0]
    return (a, b) if rng.random() < 0.5 else (b, a)
