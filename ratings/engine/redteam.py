"""Robustness ratings of the red-teaming arena: Bradley-Terry over players and (model, challenge).

An attempt ``i`` by player ``u`` against model ``m`` on challenge ``c`` is a battle whose outcome
is ``y_i = 1`` when the rule broke (success) and ``0`` when the model held. The model is

    P(success) = sigma(s_u - r_m - d_c),

with ``s`` the players' skill, ``r`` the models' robustness and ``d`` the challenges' difficulty.
It is fitted as a design-matrix change over the engine's Newton fit (``bt.Rows`` / ``bt.fit``):
players and models share one competitor index space (players ``0..P-1``, models ``P..P+M-1``),
each attempt is the ordered pair (player, model) with ``y`` as side A's score, and each
challenge but a reference one is a feature column holding ``-1`` on its attempts, so its
coefficient is ``d_c - d_ref``. There is no penalty (``penalty = 0``): the maximum-likelihood
fit of ``l = sum_i [y_i z_i - log(1 + exp z_i)]``, ``z_i = s_u - r_m - (d_c - d_ref)``, to
``max|grad l| < 1e-8`` (``bt.fit``'s criterion).

Identification (no prior): the MLE is finite only if every player has both succeeded and failed
against the identified models, every model has both held and broken, and this holds
transitively, i.e. the directed graph "player u broke model m" / "model m held against u" is
strongly connected (``identify.scored_against`` / ``_largest_component`` logic), and every
challenge has both outcomes. The fit keeps the largest strongly connected component and the
challenges with both outcomes among its attempts, repeated until nothing changes; excluded
players, models and challenges are listed with the reason (``no_losses``: always succeeded /
never held, ``no_wins`` the reverse, ``not_connected``). Their attempts cannot move the MLE of
the rest (their own parameter would run to infinity and absorb them).

Centring: robustness has mean 0 over the identified models, difficulty mean 0 over the
identified challenges, and skill absorbs the shift, ``s' = s - mean(r) - mean(d)``: a player's
skill is their log-odds of success against an average model on an average challenge. The map
is linear, ``theta' = T theta``, and the covariance is ``T Sigma T^T``.

Intervals: 95% Wald intervals ``estimate +- 1.96 se`` from either the inverse Hessian
(``"hessian"``, statsmodels' default ``Logit`` covariance) or the sandwich ``H^-1 M H^-1``
(``"sandwich"``, HC0; ``bt.sandwich``), for every model, challenge and player.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from . import bt
from .errors import CannotRateError
from .identify import closure, scored_against, strongly_connected

Z_95 = 1.959963984540054
IntervalKind = Literal["hessian", "sandwich"]


@dataclass(frozen=True)
class Estimate:
    """One parameter on the centred logit scale with its standard error and 95% interval."""

    name: str
    estimate: float
    se: float
    lower: float
    upper: float
    attempts: int
    successes: int


@dataclass(frozen=True)
class Excluded:
    """A player, model or challenge outside the identified part, with its record."""

    kind: Literal["player", "model", "challenge"]
    name: str
    attempts: int
    successes: int
    reason: Literal["no_losses", "no_wins", "not_connected"]


@dataclass(frozen=True)
class RobustnessFit:
    """The fit's three tables (centred logits, see the module docstring) and its figures."""

    models: tuple[Estimate, ...]
    challenges: tuple[Estimate, ...]
    players: tuple[Estimate, ...]
    excluded: tuple[Excluded, ...]
    n_attempts: int  # attempts in the fit (identified part)
    iterations: int
    gradient_max_norm: float
    interval: IntervalKind


def _labels(values: list[str]) -> tuple[list[str], NDArray[np.int64]]:
    names = sorted(set(values))
    index = {name: i for i, name in enumerate(names)}
    return names, np.array([index[v] for v in values], dtype=np.int64)


def _reason(successes: int, attempts: int, as_player: bool) -> Literal["no_losses", "no_wins"]:
    all_success = successes == attempts
    if as_player:
        return "no_losses" if all_success else "no_wins"
    # A model "wins" when it holds: all successes against it means it never won.
    return "no_wins" if all_success else "no_losses"


def _component(
    n: int, a: NDArray[np.int64], b: NDArray[np.int64], y: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """The largest strongly connected component of "a broke b" / "b held against a"."""
    adjacency = scored_against(n, a, b, y, 1.0 - y)
    if strongly_connected(adjacency):
        return np.ones(n, dtype=bool)
    reach = closure(adjacency)
    component = reach & reach.T
    label = np.argmax(component, axis=1)
    sizes = np.bincount(label, minlength=n)
    out: NDArray[np.bool_] = label == int(np.argmax(sizes))
    return out


def fit_robustness(
    players: list[str],
    models: list[str],
    challenges: list[str],
    success: list[bool] | NDArray[np.bool_],
    *,
    interval: IntervalKind = "sandwich",
) -> RobustnessFit:
    """Fit ``P(success) = sigma(s_player - r_model - d_challenge)`` to one row per attempt."""
    y_all = np.asarray(success, dtype=np.float64)
    n = len(y_all)
    if not (len(players) == len(models) == len(challenges) == n):
        raise ValueError("players, models, challenges and success must have the same length")
    keep = np.ones(n, dtype=bool)
    p_names, p_idx = _labels(players)
    m_names, m_idx = _labels(models)
    c_names, c_idx = _labels(challenges)
    excluded: list[Excluded] = []
    n_p, n_m, n_c = len(p_names), len(m_names), len(c_names)

    def record(
        idx: NDArray[np.int64], size: int, mask: NDArray[np.bool_]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return (
            np.bincount(idx[mask], minlength=size).astype(np.float64),
            np.bincount(idx[mask], y_all[mask], minlength=size).astype(np.float64),
        )

    while True:
        before = int(keep.sum())
        comp_in = np.zeros(n_p + n_m, dtype=bool)
        if keep.any():
            comp_in = _component(n_p + n_m, p_idx[keep], n_p + m_idx[keep], y_all[keep])
        comp_in &= np.bincount(np.r_[p_idx[keep], n_p + m_idx[keep]], minlength=n_p + n_m).astype(
            bool
        )
        keep &= comp_in[p_idx] & comp_in[n_p + m_idx]
        tries, wins = record(c_idx, n_c, keep)
        good_c = (wins > 0) & (wins < tries)
        keep &= good_c[c_idx]
        if int(keep.sum()) == before:
            break
    if not keep.any():
        raise CannotRateError(
            "robustness ratings do not exist: no players and models have both succeeded and "
            "failed against each other"
        )
    for kind, names, idx in (
        ("player", p_names, p_idx),
        ("model", m_names, m_idx),
        ("challenge", c_names, c_idx),
    ):
        tries_all, wins_all = record(idx, len(names), np.ones(n, dtype=bool))
        inside = np.bincount(idx[keep], minlength=len(names)) > 0
        for jj in np.flatnonzero(~inside):
            t, w = int(tries_all[jj]), int(wins_all[jj])
            reason: Literal["no_losses", "no_wins", "not_connected"] = "not_connected"
            if w in (0, t):
                reason = (
                    _reason(w, t, kind != "model")
                    if kind != "challenge"
                    else ("no_wins" if w == t else "no_losses")
                )
            excluded.append(Excluded(kind, names[int(jj)], t, w, reason))  # type: ignore[arg-type]

    # Re-index the identified part.
    up, pi = np.unique(p_idx[keep], return_inverse=True)
    um, mi = np.unique(m_idx[keep], return_inverse=True)
    uc, ci = np.unique(c_idx[keep], return_inverse=True)
    y = y_all[keep]
    n_p2, n_m2, n_c2 = len(up), len(um), len(uc)
    a = pi.astype(np.int64)
    b = (n_p2 + mi).astype(np.int64)
    order = np.lexsort((b, a))
    a, b, y, ci = a[order], b[order], y[order], ci[order]
    key = a * (n_p2 + n_m2) + b
    boundary = np.r_[True, key[1:] != key[:-1]]
    starts = np.flatnonzero(boundary)
    features = None
    k = n_c2 - 1
    if k > 0:
        features = np.zeros((k, len(y)))
        rows = np.flatnonzero(ci > 0)
        features[ci[rows] - 1, rows] = -1.0  # challenge 0 is the reference
    ones = np.ones(len(y))
    bt_rows = bt.Rows(
        n_models=n_p2 + n_m2,
        pair_a=a[starts],
        pair_b=b[starts],
        starts=starts,
        lengths=np.diff(np.append(starts, len(y))),
        y=y,
        c=ones,
        c2=ones,
        features=features,
        penalty=0.0,
        l2=0.0,
    )
    result = bt.fit(bt_rows)
    size = n_p2 + n_m2 + k
    if interval == "sandwich":
        cov = bt.sandwich(bt_rows, result)
    else:
        ref = result.reference
        keep_i = np.arange(size) != ref
        cov = np.zeros((size, size))
        try:
            cov[np.ix_(keep_i, keep_i)] = np.linalg.inv(result.hessian[np.ix_(keep_i, keep_i)])
        except np.linalg.LinAlgError as exc:
            raise CannotRateError("the robustness intervals are not identified") from exc
    # theta = (s, r, delta) with delta the non-reference challenges' d_c - d_ref.
    # Centred: r' = r - mean r; d = (0, delta), d' = d - mean d; s' = s - mean r - mean d.
    transform = np.zeros((n_p2 + n_m2 + n_c2, size))
    mean_r = np.zeros(size)
    mean_r[n_p2 : n_p2 + n_m2] = 1.0 / n_m2
    mean_d = np.zeros(size)
    mean_d[n_p2 + n_m2 :] = 1.0 / n_c2
    for i in range(n_p2):
        transform[i, i] = 1.0
        transform[i] -= mean_r + mean_d
    for j in range(n_m2):
        transform[n_p2 + j, n_p2 + j] += 1.0
        transform[n_p2 + j] -= mean_r
    for c in range(n_c2):
        row = n_p2 + n_m2 + c
        if c > 0:
            transform[row, n_p2 + n_m2 + c - 1] += 1.0
        transform[row] -= mean_d
    est = transform @ result.theta
    se = np.sqrt(np.clip(np.diag(transform @ cov @ transform.T), 0.0, None))

    def table(
        offset: int, names: list[str], which: NDArray[np.int64], idx: NDArray[np.int64]
    ) -> tuple[Estimate, ...]:
        tries = np.bincount(idx, minlength=len(which))
        wins = np.bincount(idx, y, minlength=len(which))
        return tuple(
            Estimate(
                name=names[int(which[j])],
                estimate=float(est[offset + j]),
                se=float(se[offset + j]),
                lower=float(est[offset + j] - Z_95 * se[offset + j]),
                upper=float(est[offset + j] + Z_95 * se[offset + j]),
                attempts=int(tries[j]),
                successes=int(round(wins[j])),
            )
            for j in range(len(which))
        )

    return RobustnessFit(
        players=table(0, p_names, up, a),
        models=table(n_p2, m_names, um, b - n_p2),
        challenges=table(n_p2 + n_m2, c_names, uc, ci),
        excluded=tuple(excluded),
        n_attempts=len(y),
        iterations=result.iterations,
        gradient_max_norm=result.gradient_max_norm,
        interval=interval,
    )
