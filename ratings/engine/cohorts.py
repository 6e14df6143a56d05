"""Bursts: a window's votes tested against everyone else's, new sources held out first.

A botnet of many fresh identities casts too few votes per identity for any per-voter test
(``ratings.engine.anomaly``), and every address is its own source, so a per-source bound does not
bind either. What it cannot hide is that its votes arrive together and disagree, as a group,
with what the rest of the arena says about the model it lifts. So the votes are grouped by the
time they were cast, at several scales (``windows_hours``: e.g. a day and a week, each also
shifted by half its width so that a burst across a boundary is whole in one window), and each
window's *cohort*, its votes, is tested against a reference fit of every other vote. Imported
history (``trusted`` on input: the operator's) is never tested.

A source (an address, a session without one, an account) is *trusted* for the votes it casts at
least ``trusted_hours`` after its first one. Trusted votes are tested like any others (a botnet
that aged its addresses is trusted), but when a burst is held out its untrusted sources go
first, and a trusted source only once they are all out. The test is of the group, never of the
visitor: an honest first-time visitor is held out only as one of a burst's largest contributors.

For a cohort ``C`` and a model ``m``, with ``θ`` the plain Bradley-Terry fit of the reference
(every vote outside ``C``, ties as half a win, a ridge of ``ridge`` towards 0 so that a thin
reference stays defined) and ``p_v = expit(θ_a − θ_b)``:

    S_m = Σ_{v ∈ C, m ∈ v} s_v (y_v − p_v)            (s_v = +1 if m is side A, −1 if side B)
    V_m = Σ p_v (1 − p_v) + d_mᵀ H⁻¹ d_m              (d_m = ∂S_m/∂θ, H the reference's Hessian)
    Z_m = S_m / √V_m

Only the cohort's votes between two models the reference knows (``min_votes`` of its votes
each) are judged: against a model it has not seen, the reference's rating is the ridge's guess.
A burst can still lift a known model through such models (a new one, or one only the burst
voted on, placed mid-board by the burst's own votes on other pairs), so a known model with
``min_votes`` cohort votes against unknown ones is judged a second time, against the reference
plus the cohort's votes that do not involve it.

``V_m``'s first term is the outcomes' variance (an upper bound for ties), the second the
reference's own uncertainty, so a cohort judged against a thin reference is not over-tested.
A model with ``|Z_m| > z_detect`` (and at least ``min_votes`` cohort votes) is a burst. The
cohort's sources are then *peeled*: ordered by their contribution to ``S_m`` in the burst's
direction, each source's votes on ``m`` are quarantined until ``|Z_m| ≤ z_release``. Detection
at a high bound keeps honest windows' false alarms rare; releasing at a low one leaves a burst
at most ``z_release`` standard deviations of what it tried, so what remains of an attack moves
the model by a fraction of its own interval. An honest source is peeled only when it is among a
burst's largest contributors in its direction.

Bursts are taken one at a time, the most extreme (window, model) of all first, and every
window is judged again without what was held out, until no model of any window is past
``z_detect``: when two windows disagree, the one that disagrees with everything else is held
out, not the rest of the arena. Everything is a function of the votes, computed from scratch:
the next refit recomputes it, so a burst stays out exactly as long as it disagrees with the rest
of the arena, and a vote is released when its window no longer stands out.

The fits run on pair tables (counts and wins per ordered pair of models), so a window costs
``O(K²)`` per Newton step whatever its votes; the votes are passed over once per scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

_NEWTON_TOL = 1e-9
_NEWTON_MAX = 50


@dataclass(frozen=True)
class Burst:
    """One model's burst in one window: where (``window_hours``, ``window_start_hours``), the
    cohort's votes on the model, its ``z`` before and after peeling, and what was quarantined."""

    window_hours: float
    window_start_hours: float
    model: int
    n_votes: int
    z_before: float
    z_after: float
    quarantined_votes: int
    quarantined_sources: int


@dataclass(frozen=True)
class CohortResult:
    """``quarantined``: one flag per input vote. ``bursts``: each burst held out, in order.
    ``windows_tested``: the (window, scale) cohorts with enough votes to test."""

    quarantined: BoolArray
    bursts: list[Burst]
    windows_tested: int


def _expit(x: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-x))
    return out


def _pair_table(a: IntArray, b: IntArray, values: FloatArray | None, n_models: int) -> FloatArray:
    """``T[i, j]``: the sum of ``values`` (or the count) over the votes with A = i, B = j."""
    flat = np.bincount(a * n_models + b, weights=values, minlength=n_models * n_models)
    table: FloatArray = flat.reshape(n_models, n_models).astype(np.float64)
    return table


def reference_fit(
    counts: FloatArray, wins: FloatArray, *, ridge: float
) -> tuple[FloatArray, FloatArray]:
    """The ridge Bradley-Terry fit of a pair table: ``θ`` and the inverse Hessian.

    ``counts[i, j]`` votes with A = i and B = j, of which ``wins[i, j]`` is A's score (a tie is
    half). Maximises ``Σ wins·log p + (counts − wins)·log(1 − p) − ridge/2 ‖θ‖²`` by Newton's
    method until the step's largest entry is below 1e-9."""
    k = counts.shape[0]
    theta = np.zeros(k)
    eye = np.eye(k)
    hessian = eye * ridge
    for _ in range(_NEWTON_MAX):
        p = _expit(theta[:, None] - theta[None, :])
        resid = wins - counts * p
        grad = resid.sum(axis=1) - resid.sum(axis=0) - ridge * theta
        w = counts * p * (1.0 - p)
        hessian = np.diag(w.sum(axis=1) + w.sum(axis=0)) - w - w.T + ridge * eye
        step = np.linalg.solve(hessian, grad)
        theta = theta + step
        if np.max(np.abs(step)) < _NEWTON_TOL:
            break
    p = _expit(theta[:, None] - theta[None, :])
    w = counts * p * (1.0 - p)
    hessian = np.diag(w.sum(axis=1) + w.sum(axis=0)) - w - w.T + ridge * eye
    cov: FloatArray = np.asarray(np.linalg.inv(hessian), dtype=np.float64)
    return np.asarray(theta, dtype=np.float64), cov


@dataclass
class _Cohort:
    """The votes of one cohort under test (indices into the input) and their fitted terms."""

    rows: IntArray
    a: IntArray
    b: IntArray
    resid: FloatArray  # y − p
    weight: FloatArray  # p (1 − p)
    source: IntArray
    tested: BoolArray  # both models known to the reference: the votes the test judges
    trusted: BoolArray  # cast by a source with a history: held out only after the others


def _cohort_z(
    c: _Cohort, cov: FloatArray, n_models: int, live: BoolArray
) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
    """Per model: ``S``, the outcomes' variance, the reference's variance term and the count,
    over the cohort's tested votes still ``live``."""
    live = live & c.tested
    a, b = c.a[live], c.b[live]
    r, w = c.resid[live], c.weight[live]
    score = np.bincount(a, r, n_models) - np.bincount(b, r, n_models)
    var = np.bincount(a, w, n_models) + np.bincount(b, w, n_models)
    n = np.bincount(a, minlength=n_models) + np.bincount(b, minlength=n_models)
    table = _pair_table(a, b, w, n_models)
    # d_m = ∂S_m/∂θ = W[m, :] + W[:, m] − e_m (row sum + column sum), one row per model.
    d = table + table.T - np.diag(table.sum(axis=1) + table.sum(axis=0))
    ref_var: FloatArray = np.asarray(np.einsum("mk,kl,ml->m", d, cov, d), dtype=np.float64)
    return (
        np.asarray(score, dtype=np.float64),
        np.asarray(var, dtype=np.float64),
        ref_var,
        n.astype(np.int64),
    )


def _peel(
    c: _Cohort,
    live: BoolArray,
    model: int,
    score: float,
    var: float,
    cov: FloatArray,
    z_release: float,
) -> tuple[IntArray, int, float]:
    """Quarantine the cohort's largest contributors to ``model``'s burst, source by source,
    until ``|Z| ≤ z_release``: the positions (in ``c``) of the votes quarantined, how many
    sources and the ``z`` left. ``V``'s two terms shrink with each source taken out. A source
    is judged by its tested votes, and all its votes on the model are held out (those against
    a model the reference does not know too)."""
    n_models = cov.shape[0]
    sign = 1.0 if score > 0 else -1.0
    everything = np.flatnonzero(live & ((c.a == model) | (c.b == model)))
    idx = np.flatnonzero(live & c.tested & ((c.a == model) | (c.b == model)))
    side = np.where(c.a[idx] == model, 1.0, -1.0)
    opponent = np.where(c.a[idx] == model, c.b[idx], c.a[idx])
    contribution = sign * side * c.resid[idx]
    sources, inverse = np.unique(c.source[idx], return_inverse=True)
    per_source = np.bincount(inverse, contribution, len(sources))
    # A source with a history (any of its votes here trusted) is taken out after the others.
    seasoned = np.bincount(inverse, c.trusted[idx].astype(np.float64), len(sources)) > 0
    per_weight = np.bincount(inverse, c.weight[idx], len(sources))
    # d_m's entries per source: its weight on each opponent (d_m[m] is minus their sum).
    per_opponent = np.zeros((len(sources), n_models))
    np.add.at(per_opponent, (inverse, opponent), c.weight[idx])
    per_opponent[:, model] -= per_weight
    d = per_opponent.sum(axis=0)
    order = np.lexsort((-per_source, seasoned))
    order = order[per_source[order] > 0]
    s, v = sign * score, var

    def z_now() -> float:
        return float(s / np.sqrt(max(v + float(d @ cov @ d), 1e-12)))

    removed: list[int] = []
    for src in order:
        if z_now() <= z_release:
            break
        s -= per_source[src]
        v -= per_weight[src]
        d = d - per_opponent[src]
        removed.append(int(src))
    gone = np.isin(c.source[everything], sources[np.array(removed, dtype=np.int64)])
    return everything[gone], len(removed), z_now()


def _windows(
    hours: FloatArray, candidates: IntArray, widths: Sequence[float], min_votes: int
) -> list[tuple[float, float, IntArray]]:
    """Every (width, start, rows) window of ``candidates`` holding at least ``min_votes``: for
    each width, the windows aligned on multiples of it and those shifted by half of it, so that
    a burst straddling a boundary is whole in one of them."""
    out: list[tuple[float, float, IntArray]] = []
    for width in widths:
        for shift in (0.0, width / 2):
            window = np.floor((hours[candidates] - shift) / width).astype(np.int64)
            order = np.argsort(window, kind="stable")
            starts = np.flatnonzero(np.r_[True, np.diff(window[order]) != 0])
            for lo, hi in zip(starts, np.r_[starts[1:], len(order)], strict=True):
                if hi - lo >= min_votes:
                    start = float(window[order[lo]] * width + shift)
                    out.append((float(width), start, candidates[order[lo:hi]]))
    return out


@dataclass
class _Worst:
    """The most extreme (window, model) of one sweep over the windows."""

    z: float
    model: int
    width: float
    start: float
    cohort: _Cohort
    live: BoolArray
    cov: FloatArray
    score: float
    var: float
    n: int


def _sweep(
    a: IntArray,
    b: IntArray,
    y: FloatArray,
    source: IntArray,
    trusted: BoolArray,
    out: BoolArray,
    suspect: BoolArray,
    windows: list[tuple[float, float, IntArray]],
    *,
    n_models: int,
    min_votes: int,
    ridge: float,
) -> _Worst | None:
    """Each window's cohort (its rows not ``out``) against a fit of every other vote neither
    ``out`` nor ``suspect``; the (window, model) with the largest ``|Z|``, or None when no
    model has ``min_votes`` cohort votes anywhere."""
    kept = ~out
    reference = kept & ~suspect
    all_counts = _pair_table(a[reference], b[reference], None, n_models)
    all_wins = _pair_table(a[reference], b[reference], y[reference], n_models)
    worst: _Worst | None = None
    for width, start, rows in windows:
        rows = rows[kept[rows]]
        if len(rows) < min_votes:
            continue
        ra, rb = a[rows], b[rows]
        own = rows[reference[rows]]  # the cohort's votes that are in the totals
        reference_counts = all_counts - _pair_table(a[own], b[own], None, n_models)
        theta, cov = reference_fit(
            reference_counts,
            all_wins - _pair_table(a[own], b[own], y[own], n_models),
            ridge=ridge,
        )
        p = _expit(theta[ra] - theta[rb])
        # Votes against a model the reference has not seen judge nothing: its rating there is
        # the ridge's guess. A model is known from ``min_votes`` reference votes.
        reference_votes = reference_counts.sum(axis=0) + reference_counts.sum(axis=1)
        known = reference_votes >= min_votes
        cohort = _Cohort(
            rows=rows,
            a=ra,
            b=rb,
            resid=y[rows] - p,
            weight=p * (1.0 - p),
            source=source[rows],
            tested=known[ra] & known[rb],
            trusted=trusted[rows],
        )
        live = np.ones(len(rows), dtype=bool)
        candidates = [(cohort, cov)]
        # A model the history has not seen (a new one, or one only this window voted on) is
        # judged by nothing in the reference, yet a burst can lift a known model through it.
        # Where a model's cohort votes are against such models, it is judged again against
        # the reference plus the cohort's votes that do not involve it: those place the new
        # models, and the votes on it are then tested against them.
        on_unknown = np.bincount(ra[~known[rb]], minlength=n_models) + np.bincount(
            rb[~known[ra]], minlength=n_models
        )
        for unseen in np.flatnonzero(known & (on_unknown >= min_votes)).tolist():
            others = ~((ra == unseen) | (rb == unseen))
            counts_m = reference_counts + _pair_table(ra[others], rb[others], None, n_models)
            wins_m = (
                all_wins
                - _pair_table(a[own], b[own], y[own], n_models)
                + _pair_table(ra[others], rb[others], y[rows][others], n_models)
            )
            theta_m, cov_m = reference_fit(counts_m, wins_m, ridge=ridge)
            known_m = counts_m.sum(axis=0) + counts_m.sum(axis=1) >= min_votes
            p_m = _expit(theta_m[ra] - theta_m[rb])
            candidates.append(
                (
                    _Cohort(
                        rows=rows,
                        a=ra,
                        b=rb,
                        resid=y[rows] - p_m,
                        weight=p_m * (1.0 - p_m),
                        source=source[rows],
                        # Only the model's own votes are judged against this reference.
                        tested=known_m[ra] & known_m[rb] & ~others,
                        trusted=trusted[rows],
                    ),
                    cov_m,
                )
            )
        for judged, judged_cov in candidates:
            score, var, ref_var, n = _cohort_z(judged, judged_cov, n_models, live)
            z = score / np.sqrt(np.maximum(var + ref_var, 1e-12))
            z[n < min_votes] = 0.0
            m = int(np.argmax(np.abs(z)))
            if worst is None or abs(z[m]) > abs(worst.z):
                worst = _Worst(
                    z=float(z[m]),
                    model=m,
                    width=width,
                    start=start,
                    cohort=judged,
                    live=live,
                    cov=judged_cov,
                    score=float(score[m]),
                    var=float(var[m]),
                    n=int(n[m]),
                )
    return worst


def cohort_quarantine(
    model_a: IntArray,
    model_b: IntArray,
    score: FloatArray,
    hours: FloatArray,
    source: IntArray,
    *,
    n_models: int,
    trusted_hours: float,
    windows_hours: Sequence[float],
    z_detect: float,
    z_release: float,
    min_votes: int,
    trusted: BoolArray | None = None,
    established: BoolArray | None = None,
    ridge: float = 1.0,
    max_bursts: int = 100,
) -> CohortResult:
    """The votes to hold out as bursts (the module's method).

    One entry per vote: ``model_a``/``model_b`` model indices below ``n_models``, ``score`` A's
    score (1 won, 0 lost, ½ a tie or both bad), ``hours`` when it was cast (hours since any fixed
    origin), ``source`` its source's index. ``trusted``: imported history, never tested. A
    tested vote is from a trusted source (held out last) when its source's first vote is at
    least ``trusted_hours`` older, or when ``established`` says so (an account old enough). At
    most ``max_bursts`` bursts are held out per run."""
    a = np.asarray(model_a, dtype=np.int64)
    b = np.asarray(model_b, dtype=np.int64)
    y = np.asarray(score, dtype=np.float64)
    t = np.asarray(hours, dtype=np.float64)
    src = np.asarray(source, dtype=np.int64)
    if not len(a):
        return CohortResult(quarantined=np.zeros(0, dtype=bool), bursts=[], windows_tested=0)
    first = np.full(int(src.max()) + 1, np.inf)
    np.minimum.at(first, src, t)
    vouched = trusted
    trusted = t - first[src] >= trusted_hours
    if established is not None:
        trusted = trusted | np.asarray(established, dtype=bool)
    # Imported history is the operator's and never tested; every other vote is, a trusted
    # source's too (an aged botnet is trusted), but trusted sources are held out last.
    tested_rows = (
        np.flatnonzero(~np.asarray(vouched, dtype=bool))
        if vouched is not None
        else np.arange(len(a))
    )
    windows = _windows(t, tested_rows, windows_hours, min_votes)
    out = np.zeros(len(a), dtype=bool)
    # A burst's whole cohort on its model (what was held out and the rest within chance) is
    # no one's reference: the remnant of a burst is not evidence against other windows.
    suspect = np.zeros(len(a), dtype=bool)
    bursts: list[Burst] = []
    for _ in range(max_bursts):
        worst = _sweep(
            a,
            b,
            y,
            src,
            trusted,
            out,
            suspect,
            windows,
            n_models=n_models,
            min_votes=min_votes,
            ridge=ridge,
        )
        if worst is None or abs(worst.z) <= z_detect:
            break
        positions, n_sources, z_after = _peel(
            worst.cohort, worst.live, worst.model, worst.score, worst.var, worst.cov, z_release
        )
        out[worst.cohort.rows[positions]] = True
        c = worst.cohort
        suspect[c.rows[(c.a == worst.model) | (c.b == worst.model)]] = True
        bursts.append(
            Burst(
                window_hours=worst.width,
                window_start_hours=worst.start,
                model=worst.model,
                n_votes=worst.n,
                z_before=worst.z,
                z_after=z_after,
                quarantined_votes=len(positions),
                quarantined_sources=n_sources,
            )
        )
    return CohortResult(quarantined=out, bursts=bursts, windows_tested=len(windows))
