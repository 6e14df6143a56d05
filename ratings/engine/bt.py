"""Bradley-Terry with style covariates, fitted by Newton's method to exact convergence.

Why one module: the fit, its sandwich covariance and its bootstrap share the private pieces of
the likelihood below (logits, gradient, Hessian, the per-pair blocks), defined once; split, those
pieces would become public across modules for no reader's benefit.

Model (Bradley & Terry 1952; LMArena's style control, blog post of 2024-08-29): battle ``i``
between models ``a`` and ``b`` with style features ``f_i`` (k z-scored differences) has

    P(A wins) = sigma(z_i),   z_i = theta_a - theta_b + beta . f_i [+ gamma],

and a tie counts as half a win (``y_i = 0.5``). ``gamma``, with the position covariate on, is
the log-odds advantage of side A (shown on the left): a feature that is 1 for every battle,
the last of ``f``, not penalised. The fit maximises the weighted log-likelihood

    l(theta, beta) = sum_i c_i [y_i z_i - log(1 + exp z_i)] - (lambda n / 2) |beta|^2

(``c_i`` = the pair's weight, inverse pair-frequency and/or inverse propensity, or 1; ``lambda``
is arena-rank's ``reg`` on its mean loss, hence the factor ``n`` battles). Ratings are identified only up to a shift, so one
reference model is held at 0 during the fit and the result is re-centred afterwards.

Convergence: Newton iterations (halving steps that overshoot, see ``fit``) stop when the
gradient of ``l`` (the sum over battles, not the mean) has max-norm below ``tol`` (1e-8 by
default); there is no iteration-count or relative-change early stop. Failing to converge in
``max_iter`` iterations raises ``CannotRateError``.

Every per-battle sum is taken per ordered pair with one ``np.add.reduceat`` over the
pair-sorted rows, then spread onto models with ``np.bincount`` over the (at most p^2) pairs,
so the Hessian (p + k square) costs O(n k) and never a dense n x p design matrix.

Intervals: the sandwich (robust, Huber-White "HC0") covariance ``H^-1 M H^-1`` with
``M = sum_i s_i s_i^T`` the outer products of per-battle scores, assembled per pair like the
Hessian; or the bootstrap, each replicate warm-started from the full-data fit. Without style
features a replicate is the classical multinomial resample, fitted by ``fit`` to the same
gradient criterion; with them each battle gets a Poisson(1) count and the replicate is
iterated in float32 until its estimated distance to its own maximum is below 3e-5 logits
(0.005 Elo points; see ``_fast_replicate``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .data import Battles, FloatArray, IntArray
from .errors import CannotRateError
from .identify import scored_against, strongly_connected

TOL = 1e-8
MAX_ITER = 100


def expit(z: FloatArray) -> FloatArray:
    """The logistic function 1 / (1 + e^-z), computed in place of ``z`` (which is consumed).

    e^-z overflowing to inf gives exactly 0.
    """
    out = np.negative(z, out=z)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)
    return out


@dataclass(frozen=True)
class Rows:
    """The rows one fit sees: a full data set or one bootstrap replicate of it."""

    n_models: int
    pair_a: IntArray  # (P,)
    pair_b: IntArray  # (P,)
    starts: IntArray  # (P,) segment starts; every segment is non-empty
    lengths: IntArray  # (P,)
    y: FloatArray  # (R,)
    c: FloatArray  # (R,) likelihood weight of the row (battles x pair weight)
    c2: FloatArray  # (R,) weight of the row's score outer product (battles x pair weight^2)
    features: FloatArray | None  # (k, R)
    penalty: float  # lambda * n on the style coefficients
    l2: float  # lambda
    position: bool = False  # the last feature row is the (unpenalised) position covariate

    @property
    def k(self) -> int:
        return 0 if self.features is None else self.features.shape[0]

    @property
    def k_style(self) -> int:
        return self.k - int(self.position)

    def penalties(self) -> FloatArray:
        """The L2 penalty on each coefficient after the ratings: ``penalty`` on style, 0 on
        the position."""
        out = np.full(self.k, self.penalty)
        if self.position:
            out[-1] = 0.0
        return out

    @property
    def n_pairs(self) -> int:
        return len(self.pair_a)


@dataclass(frozen=True)
class Fit:
    theta: FloatArray  # (p + k,) ratings (reference at 0) then style coefficients
    hessian: FloatArray  # (p + k, p + k) of -l at theta
    iterations: int
    gradient_max_norm: float
    reference: int


def rows_from_battles(battles: Battles, style_l2: float) -> Rows:
    c = battles.mult
    c2 = battles.mult
    if battles.pair_weight is not None:
        w = battles.pair_weight[battles.row_pair]
        c = battles.mult * w
        c2 = c * w
    return Rows(
        n_models=battles.n_models,
        pair_a=battles.pair_a,
        pair_b=battles.pair_b,
        starts=battles.starts,
        lengths=np.diff(np.append(battles.starts, len(battles.y))),
        y=battles.y,
        c=c,
        c2=c2,
        features=battles.features,
        penalty=style_l2 * battles.n_battles,
        l2=style_l2,
        position=battles.position,
    )


def _to_models(rows: Rows, per_pair: FloatArray) -> FloatArray:
    """Spread a per-pair score onto models: +value for side A, -value for side B."""
    p = rows.n_models
    a = np.bincount(rows.pair_a, per_pair, minlength=p).astype(np.float64)
    return a - np.bincount(rows.pair_b, per_pair, minlength=p)


def _pair_block(rows: Rows, per_pair: FloatArray) -> FloatArray:
    """sum over pairs of v (e_a - e_b)(e_a - e_b)^T as a dense p x p matrix."""
    p = rows.n_models
    flat = np.bincount(rows.pair_a * p + rows.pair_b, per_pair, minlength=p * p)
    off = flat.astype(np.float64).reshape(p, p)
    off = off + off.T
    block = -off
    block[np.diag_indices(p)] += off.sum(axis=1)
    return block


def _outer_sum(rows: Rows, v: FloatArray) -> FloatArray:
    """sum_i v_i x_i x_i^T with x_i = (e_a - e_b, f_i), assembled per pair."""
    k = rows.k
    per_pair = np.add.reduceat(v, rows.starts)
    if rows.features is None:
        return outer_from_sums(rows, per_pair, None, None)
    cross = np.empty((k, rows.n_pairs))
    gram = np.empty((k, k))
    # Feature by feature: n-long temporaries are reused by the allocator, where a k x n
    # one is a fresh mapping (page faults) each time; reduceat along axis 1 is slower too.
    for j in range(k):
        vf = rows.features[j] * v
        cross[j] = np.add.reduceat(vf, rows.starts)
        gram[:, j] = rows.features @ vf
    return outer_from_sums(rows, per_pair, cross, gram)


def outer_from_sums(
    rows: Rows, per_pair: FloatArray, cross: FloatArray | None, gram: FloatArray | None
) -> FloatArray:
    """sum_i v_i x_i x_i^T from its sums: ``per_pair`` = sum of v over each pair's battles,
    ``cross[j]`` = sum of v f_j over each pair's battles, ``gram`` = sum_i v_i f_i f_i^T."""
    p = rows.n_models
    k = 0 if gram is None else gram.shape[0]
    out = np.zeros((p + k, p + k))
    out[:p, :p] = _pair_block(rows, per_pair)
    if cross is not None and gram is not None:
        for j in range(k):
            out[:p, p + j] = _to_models(rows, cross[j])
        out[p:, p:] = gram
        out[p:, :p] = out[:p, p:].T
    return out


def _logits(rows: Rows, theta: FloatArray) -> FloatArray:
    p = rows.n_models
    z = np.repeat(theta[rows.pair_a] - theta[rows.pair_b], rows.lengths)
    if rows.features is not None:
        z += theta[p:] @ rows.features
    return z


def _gradient(rows: Rows, theta: FloatArray, prob: FloatArray) -> FloatArray:
    p = rows.n_models
    resid = rows.c * (rows.y - prob)
    g = np.empty(p + rows.k)
    g[:p] = _to_models(rows, np.add.reduceat(resid, rows.starts))
    if rows.features is not None:
        g[p:] = rows.features @ resid - rows.penalties() * theta[p:]
    return g


def gradient(rows: Rows, theta: FloatArray) -> FloatArray:
    """The gradient of ``l`` at ``theta`` (what ``fit`` drives below ``tol``)."""
    return _gradient(rows, theta, expit(_logits(rows, theta)))


def _hessian(rows: Rows, prob: FloatArray) -> FloatArray:
    h = _outer_sum(rows, rows.c * prob * (1.0 - prob))
    p = rows.n_models
    h[p:, p:] += np.diag(rows.penalties())
    return h


def _reduced(matrix: FloatArray, ref: int) -> FloatArray:
    keep = np.arange(matrix.shape[0]) != ref
    return matrix[np.ix_(keep, keep)]


def _newton_step(hessian: FloatArray, gradient: FloatArray, ref: int) -> FloatArray:
    keep = np.arange(len(gradient)) != ref
    step = np.zeros_like(gradient)
    try:
        step[keep] = np.linalg.solve(_reduced(hessian, ref), gradient[keep])
    except np.linalg.LinAlgError as exc:
        raise CannotRateError(
            "the ratings are not identified: some models or style elements are not linked by "
            "enough battles"
        ) from exc
    return step


def identified_features(rows: Rows, tol: float = 1e-8) -> NDArray[np.bool_]:
    """Which style features can be told apart from the models: a mask over ``rows.features``.

    A feature is kept when the part of it (weighted by ``c``) that is not a linear function of
    the model contrasts ``e_a - e_b`` and of the features kept before it has a squared norm
    above ``tol`` times its own. Otherwise its coefficient and the ratings trade off exactly:
    the likelihood is flat along a line and its Hessian singular. A small arena meets this when
    one model always answers with headers (say) and its opponent never does, whichever side
    each is on: the header difference is then the model contrast itself.

    The Gram matrix ``sum_i c_i x_i x_i^T`` is assembled per pair like the Hessian; its model
    block, without the reference model, is invertible whenever the models are connected.
    """
    if rows.k == 0:
        return np.zeros(0, dtype=bool)
    return identified_in_gram(_outer_sum(rows, rows.c), rows.n_models, tol)


def identified_in_gram(gram: FloatArray, n_models: int, tol: float = 1e-8) -> NDArray[np.bool_]:
    """``identified_features`` from the Gram matrix ``sum_i c_i x_i x_i^T`` ((p + k) square)."""
    p = n_models
    k = gram.shape[0] - p
    keep = np.zeros(k, dtype=bool)
    basis = list(range(1, p))  # model 0 is the reference: contrasts identify differences only
    for j in range(k):
        column = p + j
        own = gram[column, column]
        cross = gram[basis, column]
        left = own - float(cross @ np.linalg.solve(gram[np.ix_(basis, basis)], cross))
        if left > tol * own:
            keep[j] = True
            basis.append(column)
    return keep


def pair_rows(rows: Rows) -> Rows:
    """One row per ordered pair with the pair's mean score: the no-style likelihood exactly.

    Its fit (milliseconds) is the starting point of the style-controlled fit.
    """
    c = np.add.reduceat(rows.c, rows.starts)
    y = np.add.reduceat(rows.c * rows.y, rows.starts) / c
    starts = np.arange(len(c))
    return Rows(
        n_models=rows.n_models,
        pair_a=rows.pair_a,
        pair_b=rows.pair_b,
        starts=starts,
        lengths=np.ones(len(c), dtype=np.int64),
        y=y,
        c=c,
        c2=c,
        features=None,
        penalty=0.0,
        l2=0.0,
    )


def check_identified(rows: Rows, models: list[str]) -> None:
    """Finite maximum-likelihood ratings need every model to have beaten and lost to the rest.

    Formally the directed graph "a scored against b" (a win or a tie) must be strongly
    connected (Zermelo 1929; Ford 1957); otherwise some rating runs off to infinity. ``rate``
    restricts the battles to such a set first (``identify``); this check is for bootstrap
    replicates, which can lose a model's only wins or losses and are then redrawn.
    """
    a_points = np.add.reduceat(rows.c * rows.y, rows.starts)
    b_points = np.add.reduceat(rows.c * (1.0 - rows.y), rows.starts)
    adjacency = scored_against(rows.n_models, rows.pair_a, rows.pair_b, a_points, b_points)
    if not strongly_connected(adjacency):
        raise CannotRateError(
            "maximum-likelihood ratings do not exist: some models won (or lost) every battle "
            f"against the rest, or never met them (among {', '.join(models[:5])}, ...)"
        )


def reference_model(n_models: int, pair_a: IntArray, pair_b: IntArray, per_pair: FloatArray) -> int:
    """The best-connected model (most weight in its pairs): as the reference held at 0 it
    keeps the reduced Hessian well conditioned."""
    return int(
        np.argmax(np.bincount(pair_a, per_pair, n_models) + np.bincount(pair_b, per_pair, n_models))
    )


#: ``evaluate(theta)`` returns the gradient of ``l`` at ``theta`` and a function giving the
#: Hessian of ``-l`` there (called at most once, after the gradient).
Evaluate = Callable[[FloatArray], tuple[FloatArray, Callable[[], FloatArray]]]


def fit(
    rows: Rows,
    *,
    theta0: FloatArray | None = None,
    tol: float = TOL,
    max_iter: int = MAX_ITER,
) -> Fit:
    """Maximise ``l`` by Newton's method until max|grad| < tol (see ``newton``)."""
    p = rows.n_models
    ref = reference_model(p, rows.pair_a, rows.pair_b, np.add.reduceat(rows.c, rows.starts))
    theta = np.zeros(p + rows.k) if theta0 is None else theta0.copy()

    def evaluate(at: FloatArray) -> tuple[FloatArray, Callable[[], FloatArray]]:
        prob = expit(_logits(rows, at))
        return _gradient(rows, at, prob), lambda: _hessian(rows, prob)

    return newton(evaluate, theta, p, ref, tol=tol, max_iter=max_iter)


def newton(
    evaluate: Evaluate,
    theta: FloatArray,
    n_models: int,
    ref: int,
    *,
    tol: float = TOL,
    max_iter: int = MAX_ITER,
) -> Fit:
    """Newton's method from ``theta`` (shifted so that model ``ref`` is at 0) until max|grad| < tol.

    ``l`` is concave, so along a Newton step ``s`` the slope ``grad(theta + t s) . s`` only
    decreases; a step whose end slope is still >= 0 cannot have decreased ``l``. Steps that
    overshoot (end slope < 0) are halved, except tiny ones (max |t s| < 1e-3 logits), which are
    in Newton's quadratic regime. This needs only the gradient at the candidate, which the
    next iteration uses anyway, so the likelihood itself is never evaluated. The last
    ``evaluate`` call is always at the returned ``theta``.
    """
    theta = theta.copy()
    theta[:n_models] -= theta[ref]
    g, hessian = evaluate(theta)
    for iteration in range(max_iter + 1):
        gmax = float(np.max(np.abs(g)))
        hess = hessian()
        if gmax < tol:
            return Fit(theta, hess, iteration, gmax, ref)
        step = _newton_step(hess, g, ref)
        t = 1.0
        while True:
            candidate = theta + t * step
            g_new, hessian_new = evaluate(candidate)
            small = t * float(np.max(np.abs(step))) < 1e-3
            if float(np.dot(g_new, step)) >= 0.0 or small:
                break
            t *= 0.5
        theta, g, hessian = candidate, g_new, hessian_new
    raise CannotRateError(
        f"the fit did not converge in {max_iter} Newton iterations "
        f"(gradient max-norm {gmax:.3g}); the ratings may not exist for these battles"
    )


def sandwich(rows: Rows, result: Fit) -> FloatArray:
    """Robust covariance H^-1 M H^-1 of theta (reference row and column are 0).

    ``M = sum_i (s_i - u)(s_i - u)^T`` with ``s_i = c_i (y_i - p_i) x_i`` the battle's score and
    ``u`` its share of the penalty gradient (0 without L2), i.e. the HC0 estimator.
    """
    prob = expit(_logits(rows, result.theta))
    meat = _outer_sum(rows, rows.c2 * (rows.y - prob) ** 2)
    return robust_covariance(
        result, meat, rows.n_models, penalty=rows.penalty, l2=rows.l2, position=rows.position
    )


def robust_covariance(
    result: Fit,
    meat: FloatArray,
    n_models: int,
    *,
    penalty: float,
    l2: float,
    position: bool = False,
) -> FloatArray:
    """``H^-1 M H^-1`` from the fit's Hessian and ``meat = sum_i s_i s_i^T`` (see ``sandwich``)."""
    p = n_models
    size = len(result.theta)
    if penalty:
        # sum_i s_i = n u at the optimum, so sum (s_i - u)(s_i - u)^T = sum s s^T - n u u^T.
        u = np.zeros(size)
        u[p:] = l2 * result.theta[p:]
        if position:
            u[-1] = 0.0  # the position is not penalised: its scores sum to 0
        meat = meat - (penalty / l2) * np.outer(u, u)
    ref = result.reference
    keep = np.arange(size) != ref
    try:
        inv = np.linalg.inv(_reduced(result.hessian, ref))
    except np.linalg.LinAlgError as exc:
        raise CannotRateError(
            "the rating intervals are not identified: the information matrix is singular"
        ) from exc
    cov = np.zeros((size, size))
    cov[np.ix_(keep, keep)] = inv @ _reduced(meat, ref) @ inv
    return cov


def _resample(rows: Rows, battles: Battles, rng: np.random.Generator) -> Rows:
    """One classical bootstrap replicate of grouped rows: n battles drawn with replacement."""
    n = battles.n_battles
    counts = rng.multinomial(n, battles.mult / n).astype(np.float64)
    keep = np.flatnonzero(counts)
    row_pair = battles.row_pair[keep]
    boundary = np.empty(len(keep), dtype=bool)
    boundary[0] = True
    np.not_equal(row_pair[1:], row_pair[:-1], out=boundary[1:])
    starts = np.flatnonzero(boundary)
    pairs = row_pair[starts]
    c = counts[keep]
    c2 = c
    if battles.pair_weight is not None:
        w = battles.pair_weight[row_pair]
        c = c * w
        c2 = c * w
    return Rows(
        n_models=rows.n_models,
        pair_a=rows.pair_a[pairs],
        pair_b=rows.pair_b[pairs],
        starts=starts,
        lengths=np.diff(np.append(starts, len(keep))),
        y=rows.y[keep],
        c=c,
        c2=c2,
        features=None if rows.features is None else np.ascontiguousarray(rows.features[:, keep]),
        penalty=rows.penalty,
        l2=rows.l2,
        position=rows.position,
    )


def _poisson_table() -> NDArray[np.float32]:
    """Poisson(1) by inverse CDF on 16-bit uniforms: ``table[u]`` for u uniform on 0..65535.

    Each probability is rounded to a multiple of 2^-16 (errors below 8e-6); counts of 9 or
    more (probability 1.1e-6) are not drawn. One lookup per battle is 2-3x cheaper than
    comparing 32-bit uniforms with the CDF, and about 8x cheaper than ``Generator.poisson``.
    """
    cdf = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(9)])
    edges = np.round(cdf * 65536).astype(np.int64)
    edges[-1] = 65536
    return np.repeat(np.arange(9), np.diff(np.r_[0, edges])).astype(np.float32)


_POISSON = _poisson_table()

#: A replicate stops when the estimated distance to its own maximum, after the last step,
#: is below this many logits (0.005 Elo points; bootstrap intervals are points wide).
BOOT_TOL = 3e-5
#: Steps this small are at the float32 rounding floor of the replicate's gradient.
BOOT_FLOOR = 1e-7


def _poisson_counts(rng: np.random.Generator, n: int) -> NDArray[np.float32]:
    out: NDArray[np.float32] = _POISSON[rng.integers(0, 65536, n, dtype=np.uint16)]
    return out


@dataclass(frozen=True)
class _BootData:
    """Per-battle arrays for fast replicates, in float32 (see ``bootstrap``)."""

    features: NDArray[np.float32]  # (k, n)
    y: NDArray[np.float32]
    weight: NDArray[np.float32] | None  # inverse pair-frequency weights per battle
    resid: NDArray[np.float32]  # w (y - p_hat) at the full-data fit
    curv: NDArray[np.float32]  # w p_hat (1 - p_hat)
    hessian: FloatArray  # full-data Hessian at the fit (cross and style blocks are reused)
    needs_check: bool  # whether a replicate can lose all of a model's wins or losses


def _boot_data(rows: Rows, full: Fit) -> _BootData:
    assert rows.features is not None
    prob = expit(_logits(rows, full.theta))
    w = rows.c  # one battle per row: the pair weight
    p = rows.n_models
    won = np.bincount(rows.pair_a, np.add.reduceat(rows.y, rows.starts), p) + np.bincount(
        rows.pair_b, np.add.reduceat(1.0 - rows.y, rows.starts), p
    )
    lost = np.bincount(rows.pair_a, np.add.reduceat(1.0 - rows.y, rows.starts), p) + np.bincount(
        rows.pair_b, np.add.reduceat(rows.y, rows.starts), p
    )
    return _BootData(
        features=rows.features.astype(np.float32),
        y=rows.y.astype(np.float32),
        weight=None if np.all(w == 1.0) else w.astype(np.float32),
        resid=(w * (rows.y - prob)).astype(np.float32),
        curv=(w * prob * (1.0 - prob)).astype(np.float32),
        hessian=full.hessian,
        needs_check=bool(min(won.min(), lost.min()) < 40),
    )


def _fast_replicate(
    rows: Rows, boot: _BootData, full: Fit, rng: np.random.Generator
) -> tuple[FloatArray, int]:
    """One Poisson-bootstrap replicate of per-battle rows.

    Each battle is counted ``Poisson(1)`` times. Newton steps start at the full-data fit: the
    first uses the residuals and curvatures stored there (no exponentials), later ones
    recompute them in float32. The ratings block of the Hessian is the replicate's own; the
    small style blocks come from the full-data Hessian, which they match to O(1/sqrt(n)).
    The iteration converges linearly (each step is about 1/100 of the previous one on the
    benchmark), so after a step ``s_k`` the remaining error is estimated as
    ``|s_k| r / (1 - r)`` with ``r = |s_k| / |s_(k-1)|`` (max-norms); iteration stops when that is
    below ``BOOT_TOL`` or the step is at the float32 floor. A replicate that does not get there
    in 12 steps is finished by the exact float64 ``fit``.
    """
    p = rows.n_models
    assert rows.features is not None
    for _ in range(100):
        counts = _poisson_counts(rng, len(rows.y))
        if not boot.needs_check:
            break
        try:
            check_identified(_weighted(rows, counts), [str(i) for i in range(p)])
        except CannotRateError:
            continue  # the MLE of this replicate does not exist: draw again
        break
    else:
        raise CannotRateError("bootstrap replicates keep losing a model's only wins or losses")
    c = counts if boot.weight is None else counts * boot.weight
    ref = full.reference
    keep = np.arange(len(full.theta)) != ref
    hess = boot.hessian.copy()
    theta = full.theta.copy()
    resid = counts * boot.resid  # the stored values already carry the pair weights
    curv = counts * boot.curv
    previous = 0.0
    for iteration in range(1, 13):
        g = np.empty(len(theta))
        g[:p] = _to_models(rows, np.add.reduceat(resid, rows.starts, dtype=np.float64))
        # The curvature only steers the iteration, so float32 sums are enough.
        g[p:] = (boot.features @ resid).astype(np.float64) - rows.penalties() * theta[p:]
        hess[:p, :p] = _pair_block(rows, np.add.reduceat(curv, rows.starts).astype(np.float64))
        step = np.zeros_like(theta)
        step[keep] = np.linalg.solve(hess[np.ix_(keep, keep)], g[keep])
        theta += step
        size = float(np.max(np.abs(step)))
        ratio = size / previous if previous else np.inf  # no estimate after the first step
        if size < BOOT_FLOOR or (ratio < 0.5 and size * ratio / (1.0 - ratio) < BOOT_TOL):
            return theta, iteration
        previous = size
        d = (theta[rows.pair_a] - theta[rows.pair_b]).astype(np.float32)
        z = theta[p:].astype(np.float32) @ boot.features
        z += np.repeat(d, rows.lengths)
        # prob = 1 / (1 + exp(-z)) in place: four passes over n floats, no temporaries.
        prob = np.negative(z, out=z)
        with np.errstate(over="ignore"):
            np.exp(prob, out=prob)
        prob += 1.0
        np.reciprocal(prob, out=prob)
        resid = c * (boot.y - prob)
        curv = c * prob * (1.0 - prob)
    result = fit(_weighted(rows, counts), theta0=theta)
    return result.theta, iteration + result.iterations


def _weighted(rows: Rows, counts: NDArray[np.float32]) -> Rows:
    """``rows`` with each battle counted ``counts`` times (float64, for exact fits and checks)."""
    mult = counts.astype(np.float64)
    return Rows(
        n_models=rows.n_models,
        pair_a=rows.pair_a,
        pair_b=rows.pair_b,
        starts=rows.starts,
        lengths=rows.lengths,
        y=rows.y,
        c=rows.c * mult,
        c2=rows.c2 * mult,
        features=rows.features,
        penalty=rows.penalty,
        l2=rows.l2,
        position=rows.position,
    )


def _grouped_replicate(
    rows: Rows, battles: Battles, full: Fit, rng: np.random.Generator
) -> tuple[FloatArray, int]:
    """A replicate of grouped rows (no style features): tiny, so fitted exactly in float64."""
    for _ in range(100):
        sample = _resample(rows, battles, rng)
        try:
            check_identified(sample, battles.models)
        except CannotRateError:
            continue  # the MLE of this replicate does not exist: draw again
        break
    else:
        raise CannotRateError("bootstrap replicates keep losing a model's only wins or losses")
    result = fit(sample, theta0=full.theta)
    return result.theta, result.iterations


def bootstrap(
    rows: Rows,
    battles: Battles,
    full: Fit,
    *,
    rounds: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> tuple[FloatArray, int]:
    """Replicate parameter vectors (rounds x (p + k)) and the total iteration count.

    Without style features (the position alone does not count: its rows may be grouped) a
    replicate is n battles drawn with replacement (multinomial over the rows) and fitted
    exactly. With style features each battle gets a Poisson(1)
    count (the Poisson bootstrap, which matches the multinomial one to O(1/n)) and is fitted
    by ``_fast_replicate``. Replicates whose MLE does not exist are redrawn.

    Round ``r`` draws from its own stream ``SeedSequence(seed).spawn(rounds)[r]``, so results
    do not depend on the thread count; numpy releases the GIL in its array loops.
    """
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(rounds)]
    out = np.empty((rounds, len(full.theta)))
    iterations = 0
    n_workers = workers or min(2, os.cpu_count() or 1)
    if rows.k_style == 0:

        def one(stream: np.random.Generator) -> tuple[FloatArray, int]:
            return _grouped_replicate(rows, battles, full, stream)

    else:
        boot = _boot_data(rows, full)

        def one(stream: np.random.Generator) -> tuple[FloatArray, int]:
            return _fast_replicate(rows, boot, full, stream)

    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        for done, (theta, its) in enumerate(pool.map(one, streams), start=1):
            out[done - 1] = theta
            iterations += its
            if progress is not None:
                progress(done, rounds)
    return out, iterations


def pair_totals(battles: Battles) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Battle counts and A's points per ordered pair (unweighted)."""
    battles_per_pair = np.add.reduceat(battles.mult, battles.starts)
    points = np.add.reduceat(battles.mult * battles.y, battles.starts)
    return battles_per_pair, points
