"""Ranks from 95% rating intervals: the rank (UB), the rank spread, and tiers.

Every function takes per-model bounds ``lower`` and ``upper`` (same length, any model order)
and compares intervals only; point ratings set the order of tiers, never a boundary. Pairwise
comparisons are one ``p x p`` boolean array (``p`` rated models: hundreds at most), so no
Python loop runs over models; ``tiers`` loops once per tier.

An interval is taken as ``lower <= upper``; a NaN bound compares false with everything (it
separates the model from no one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def rank_spreads(lower: FloatArray, upper: FloatArray) -> tuple[IntArray, IntArray]:
    """Each model's rank spread among the models given, LMArena's "rank spread":

    * best rank ``1 + #{j : lower_j > upper_i}``, one plus the models that are better with
      confidence (their whole interval is above model ``i``'s): the rank (UB);
    * worst rank ``N - #{j : upper_j < lower_i}``, ``N`` minus the models that are worse with
      confidence (their whole interval is below ``i``'s).

    Both inequalities are strict: touching intervals do not separate. ``best <= worst``, and
    the two are equal exactly when every other interval is wholly above or wholly below.
    """
    n = len(lower)
    above = lower[None, :] > upper[:, None]  # [i, j]: j is better than i with confidence
    below = upper[None, :] < lower[:, None]  # [i, j]: j is worse than i with confidence
    best = 1 + above.sum(axis=1, dtype=np.int64)
    worst = n - below.sum(axis=1, dtype=np.int64)
    return best, worst


def upper_bound_ranks(lower: FloatArray, upper: FloatArray) -> list[int]:
    """Rank = 1 + the number of models whose lower bound is above this model's upper bound."""
    return [int(r) for r in rank_spreads(lower, upper)[0]]


def leaderboard_ranks(lower: FloatArray, upper: FloatArray, preliminary: BoolArray) -> list[int]:
    """Rank (UB) of the established models among themselves; a preliminary model's Rank (UB)
    among every model, but never above an established one (at least 1 + their worst rank)."""
    return [int(r) for r in _ranks_and_spreads(lower, upper, preliminary)[0]]


def _ranks_and_spreads(
    lower: FloatArray, upper: FloatArray, preliminary: BoolArray
) -> tuple[IntArray, IntArray]:
    established = ~preliminary
    ranks, worst = rank_spreads(lower, upper)
    if established.any():
        est_best, est_worst = rank_spreads(lower[established], upper[established])
        ranks[established] = est_best
        worst[established] = est_worst
        floor = int(est_best.max()) + 1
        ranks[preliminary] = np.maximum(ranks[preliminary], floor)
    return ranks, np.maximum(worst, ranks)


def tiers(
    rating: FloatArray, lower: FloatArray, upper: FloatArray, preliminary: BoolArray
) -> IntArray:
    """Tiers of the established models, numbered from 1; 0 for a preliminary model (no tier).

    The established models are taken in rating order (highest first; equal ratings in the
    order given). The first model opens tier 1 as its *top*. Going down, a model joins the
    current tier unless its upper bound is below the lower bound of the tier's top model;
    then it opens the next tier as that tier's top.

    What it means: each model's interval reaches its tier top's interval (they are not
    separated), and each tier's top is worse with confidence than the previous tier's top.
    What it does not mean: that any two models of a tier overlap each other, nor that every
    model of a tier is separated from every model of the tier above (a model with a wide
    interval can reach into the tier above, and still belongs to the tier its rating places
    it in). A tier is a reading aid, not a test; ranks and rank spreads are the comparisons.
    """
    n = len(rating)
    out = np.zeros(n, dtype=np.int64)
    index = np.flatnonzero(~preliminary)
    order = index[np.argsort(-rating[index], kind="stable")]
    low, up = lower[order], upper[order]
    ranked = np.zeros(len(order), dtype=np.int64)
    top, tier = 0, 1
    while top < len(order):
        below = np.flatnonzero(up[top + 1 :] < low[top])
        end = top + 1 + int(below[0]) if below.size else len(order)
        ranked[top:end] = tier
        top, tier = end, tier + 1
    out[order] = ranked
    return out


@dataclass(frozen=True)
class Positions:
    """Each model's rank (UB), worst rank of its spread, and tier (0: preliminary, no tier)."""

    rank: IntArray
    rank_worst: IntArray
    tier: IntArray


def leaderboard_positions(
    rating: FloatArray, lower: FloatArray, upper: FloatArray, preliminary: BoolArray
) -> Positions:
    """Ranks, rank spreads and tiers as the leaderboard shows them.

    An established model's spread is ``rank_spreads`` among the established models. A
    preliminary model's is ``rank_spreads`` among every rated model, its best rank raised as
    its rank is (``leaderboard_ranks``: never above an established model) and its worst rank
    never better than that. Tiers: ``tiers``. Give the models in leaderboard order so that
    equal ratings are tiered in that order.
    """
    rank, worst = _ranks_and_spreads(lower, upper, preliminary)
    return Positions(rank=rank, rank_worst=worst, tier=tiers(rating, lower, upper, preliminary))
