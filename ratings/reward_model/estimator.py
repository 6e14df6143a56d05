"""A Bradley-Terry head on feature vectors: fit, Laplace covariance, rewards with intervals.

Model: answer ``a`` has features ``phi_a`` (d,) and a latent quality ``w . phi_a``; a vote
between ``a`` and ``b`` is won by ``a`` with

    P(a beats b) = sigma(w . (phi_a - phi_b)),

and, as the arena's ratings count them (``ratings.engine.data.OUTCOMES``), a tie and a "both
bad" vote are each half a win (``y = 0.5``). The fit minimises the penalised negative
log-likelihood

    L(w) = - sum_i [y_i z_i - log(1 + exp z_i)] + (l2 / 2) |w|^2,   z_i = w . d_i,

by Newton's method with step halving (the objective is strictly convex for ``l2 > 0``; a step
is halved while it raises the objective by more than 1e-12 of its value): it stops
when the max-norm of the gradient is below ``tol`` (1e-8 by default) and raises
``RuntimeError`` after ``max_iter`` iterations. No data gives ``w = 0`` (the prior).

Intervals (the Laplace approximation): the posterior of ``w`` is taken as normal with mean the
fit and covariance ``H^-1``, ``H = sum_i p_i (1 - p_i) d_i d_i^T + l2 I`` the Hessian of ``L``
there. A completion's reward within its group is ``w . (phi_k - mean_group phi)``, whose
variance is ``c^T H^-1 c`` for ``c = phi_k - mean_group phi``; rewards and their 95% intervals
are given on the Elo scale (400 / ln 10 per logit) with 0 the group's mean, as the humans'
(``ratings.env_rewards``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

ELO_PER_LOGIT = 400.0 / math.log(10.0)
Z95 = 1.959963984540054
TOL = 1e-8
MAX_ITER = 100
# Penalties tried by ``select_l2``, per vote of the training set (the penalty is l2 * n).
L2_GRID: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


@dataclass(frozen=True)
class BTHead:
    """A fitted head: ``weights_`` (d,), ``covariance_`` (d, d) = H^-1, the penalty and what
    the fit read."""

    weights_: FloatArray
    covariance_: FloatArray
    l2: float
    n_pairs: int
    iterations: int


def _sigmoid(z: FloatArray) -> FloatArray:
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * z))  # exact and overflow-free
    return out


def fit_bt_head(
    diffs: FloatArray,
    y: FloatArray,
    *,
    l2: float,
    tol: float = TOL,
    max_iter: int = MAX_ITER,
) -> BTHead:
    """Fit ``w`` on the pairs' feature differences ``diffs`` (n, d) and outcomes ``y`` (n,) in
    [0, 1] (1: the first answer won, 0.5: a tie of either kind); see the module docstring."""
    if l2 <= 0:
        raise ValueError("l2 must be positive: the head is identified through its penalty.")
    n, d = diffs.shape
    if y.shape != (n,):
        raise ValueError(f"y has shape {y.shape}; expected ({n},).")
    w = np.zeros(d)

    def objective(w: FloatArray) -> float:
        z = diffs @ w
        return float(-(y @ z) + np.logaddexp(0.0, z).sum() + 0.5 * l2 * (w @ w))

    value = objective(w)
    iterations = 0
    while True:
        z = diffs @ w
        p = _sigmoid(z)
        grad = diffs.T @ (p - y) + l2 * w
        hessian = (diffs.T * (p * (1.0 - p))) @ diffs + l2 * np.eye(d)
        if np.max(np.abs(grad), initial=0.0) < tol:
            break
        if iterations >= max_iter:
            raise RuntimeError(f"The head did not converge in {max_iter} Newton iterations.")
        step = np.linalg.solve(hessian, grad)
        scale = 1.0
        while True:
            candidate = w - scale * step
            new = objective(candidate)
            # Near the optimum the decrease is below the objective's rounding: a step that does
            # not raise it beyond that is taken, or halving would stall the iterations there.
            if new <= value + 1e-12 * max(1.0, abs(value)) or scale < 1e-10:
                break
            scale /= 2.0
        w, value = candidate, new
        iterations += 1
    covariance = np.linalg.inv(hessian)
    covariance = 0.5 * (covariance + covariance.T)
    return BTHead(weights_=w, covariance_=covariance, l2=l2, n_pairs=n, iterations=iterations)


def prior_head(d: int, *, l2: float) -> BTHead:
    """The head before any vote: ``w = 0`` and covariance ``I / l2`` (what ``fit_bt_head``
    returns on no pairs)."""
    return fit_bt_head(np.zeros((0, d)), np.zeros(0), l2=l2)


def win_probability(head: BTHead, diffs: FloatArray) -> FloatArray:
    """P(first beats second) for each row of feature differences."""
    return _sigmoid(diffs @ head.weights_)


@dataclass(frozen=True)
class GroupRewards:
    """Rewards of a group's members on the Elo scale, 0 = the group's mean, and their 95%
    Laplace intervals; ``sd`` is the reward's standard deviation (Elo points)."""

    score: FloatArray
    low: FloatArray
    high: FloatArray
    sd: FloatArray


def group_rewards(head: BTHead, features: FloatArray) -> GroupRewards:
    """Each member's ``w . (phi_k - mean phi)`` and interval (module docstring); ``features``
    is (k, d), one row per member of the group."""
    centred = features - features.mean(axis=0, keepdims=True)
    logit = centred @ head.weights_
    variance = np.einsum("ij,jk,ik->i", centred, head.covariance_, centred)
    sd = np.sqrt(np.clip(variance, 0.0, None)) * ELO_PER_LOGIT
    score = logit * ELO_PER_LOGIT
    return GroupRewards(score=score, low=score - Z95 * sd, high=score + Z95 * sd, sd=sd)


def fold_of_groups(groups: Sequence[object], k: int, *, seed: int = 0) -> NDArray[np.int64]:
    """A fold number (0..k-1) per row such that rows of one group (a question, a prompt)
    share a fold: groups are shuffled with ``seed`` and dealt round-robin."""
    unique = sorted({str(g) for g in groups})
    order = np.random.default_rng(seed).permutation(len(unique))
    fold_of = {unique[j]: i % k for i, j in enumerate(order)}
    return np.array([fold_of[str(g)] for g in groups], dtype=np.int64)


def log_loss(p: FloatArray, y: FloatArray) -> float:
    """Mean binary cross-entropy of probabilities ``p`` against outcomes ``y`` (ties 0.5)."""
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-(y * np.log(q) + (1 - y) * np.log(1 - q)).mean()) if len(p) else math.nan


def select_l2(
    diffs: FloatArray,
    y: FloatArray,
    groups: Sequence[object],
    *,
    grid: Sequence[float] = L2_GRID,
    k: int = 3,
    seed: int = 0,
) -> float:
    """The penalty (``l2`` per training pair, times the pairs) of ``grid`` with the lowest
    held-out log-loss over ``k`` folds split by ``groups``; the grid's middle without enough
    groups to split."""
    n = len(y)
    if n == 0 or len({str(g) for g in groups}) < k:
        return grid[len(grid) // 2] * max(n, 1)
    folds = fold_of_groups(groups, k, seed=seed)
    best: tuple[float, float] | None = None
    for per_pair in grid:
        losses = []
        for fold in range(k):
            train, test = folds != fold, folds == fold
            head = fit_bt_head(diffs[train], y[train], l2=per_pair * int(train.sum()))
            losses.append(log_loss(win_probability(head, diffs[test]), y[test]) * test.sum())
        loss = sum(losses) / n
        if best is None or loss < best[0]:
            best = (loss, per_pair)
    assert best is not None
    return best[1] * n
