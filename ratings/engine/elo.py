"""Online Elo, the arena's original rating (kept for reference, not for the leaderboard).

For each battle in input order, with ``E_a = 1 / (1 + base^((R_b - R_a) / scale))`` and ``S_a``
the score of A (1, 0.5 or 0): ``R_a += K (S_a - E_a)`` and ``R_b -= K (S_a - E_a)``. Defaults
(K=4, scale 400, base 10, start 1000) are those of the LMSYS notebooks that published the
arena55k-subset numbers this module is tested against.
"""

from __future__ import annotations

import math

import numpy as np

from .data import FloatArray, IntArray


def online_elo(
    a: IntArray,
    b: IntArray,
    score_a: FloatArray,
    n_models: int,
    *,
    k: float = 4.0,
    scale: float = 400.0,
    base: float = 10.0,
    initial: float = 1000.0,
) -> FloatArray:
    """Ratings after replaying the battles once in order.

    Each update depends on the previous one, so this is the one loop over battles in the
    engine; it runs on plain Python floats, which is several times faster than numpy scalars.
    """
    ratings = [initial] * n_models
    c = math.log(base) / scale
    exp = math.exp
    for i, j, s in zip(a.tolist(), b.tolist(), score_a.tolist(), strict=True):
        ra = ratings[i]
        rb = ratings[j]
        delta = k * (s - 1.0 / (1.0 + exp(c * (rb - ra))))
        ratings[i] = ra + delta
        ratings[j] = rb - delta
    return np.asarray(ratings, dtype=np.float64)
