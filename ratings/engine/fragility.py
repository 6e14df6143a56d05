"""How fragile each rank is: the fewest votes whose removal, or whose flip, swaps two models.

For a pair of models ``i`` ranked above ``j`` (gap ``d = theta_i - theta_j > 0`` logits), the
audit looks for a small set of votes that, removed from the data (or with their winner
reversed), gives a refit where ``j`` is rated above ``i``. The method follows Broderick,
Giordano & Meager (2020, "An automatic finite-sample robustness metric", AMIP) as applied to
arena leaderboards by Huang et al. (2025, "Dropping just a handful of preferences can change
top large language model rankings"):

1. **Influence.** At the board's own fit (same model: Bradley-Terry with the same style
   features, weights and L2 penalty, see ``bt``), with ``H`` the Hessian of ``-l`` (the
   reference model's row and column removed) and ``u = H^-1 (e_i - e_j)``, removing one battle
   ``v`` (row ``r`` of ``m_r`` identical battles, weight ``c_r``, score ``c_r (y_r - p_r) x_r``)
   moves the gap by about

       delta_remove(v) = -(c_r / m_r) (y_r - p_r) (u . x_r),

   and reversing its winner (``y -> 1 - y``; a tie has no winner to reverse) by about

       delta_flip(v) = (c_r / m_r) (1 - 2 y_r) (u . x_r),

   with ``x_r = (e_a - e_b, f_r)`` (the infinitesimal jackknife). One ``p + k`` solve per pair,
   then one vectorised pass over the rows.
2. **Greedy order.** The battles with a negative effect, most negative first; the first-order
   estimate of the count is the shortest prefix whose summed effect reaches ``-d``.
3. **Verified by refitting.** The prefix of ``k`` battles is removed (or flipped) and the
   model refitted to the board's own criterion (gradient max-norm below ``bt.TOL``),
   warm-started at the fit plus the first-order change ``H^-1 Delta g`` (see ``_refit``). ``k``
   is searched from the estimate, then by false position on the refitted gaps between the
   largest ``k`` known to keep the order and the smallest known to swap it, at most
   ``MAX_REFITS`` refits per pair and kind. A modified data set whose ratings do not exist (a
   model left with no wins, say) or whose fit fails counts as not swapping.

Reported: the smallest ``k`` whose refit swapped the pair, an **upper bound** on the true
minimum over every subset (NP-hard in general), "at most k"; **exact** only when it is 1.
``None``: no swapping prefix within the refits. The refits keep the full data's style
standardisation and, when used, its inverse pair-frequency weights.

The leader is tested against the runner-up and the ``LEADER_CHALLENGERS`` others with the
smallest estimates; the smallest verified count is reported with its challenger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from . import bt
from .data import Battles, FloatArray, IntArray
from .errors import CannotRateError
from .identify import scored_against, strongly_connected
from .result import BoundDict, FragilityDict, LeaderBoundDict

#: Ranks audited: the adjacent pairs among the first ``TOP`` established models.
TOP = 10
#: Refits at most per pair and kind of change (removal, flip).
MAX_REFITS = 6
#: Challengers of the leader besides the runner-up that are refitted, best estimates first.
LEADER_CHALLENGERS = 2

Kind = Literal["removal", "flip"]
KINDS: tuple[Kind, ...] = ("removal", "flip")


@dataclass(frozen=True)
class Bound:
    """A verified count of votes: a refit with that many removed (or flipped) swaps the pair.
    ``exact``: proven the fewest (only when ``votes`` is 1); else an upper bound ("at most").
    ``estimate``: the first-order (influence) estimate the search started from."""

    votes: int
    exact: bool
    estimate: int | None


@dataclass(frozen=True)
class PairFragility:
    """Adjacent models in rating order: ``upper`` at position ``rank``, ``lower`` just below."""

    rank: int
    upper: str
    lower: str
    gap: float  # rating points (``points_per_logit`` times the logit gap)
    removal: Bound | None
    flip: Bound | None


@dataclass(frozen=True)
class LeaderBound:
    """The fewest votes found that put some challenger above the leader, and which one."""

    bound: Bound
    challenger: str


@dataclass(frozen=True)
class Fragility:
    """The audit of one fit: adjacent pairs from the top down, and the leader's."""

    pairs: tuple[PairFragility, ...]
    leader: str | None
    leader_removal: LeaderBound | None
    leader_flip: LeaderBound | None
    n_battles: int
    refits: int
    top: int

    def to_dict(self) -> FragilityDict:
        def bound(b: Bound | None) -> BoundDict | None:
            if b is None:
                return None
            return {"votes": b.votes, "exact": b.exact, "estimate": b.estimate}

        def leader(b: LeaderBound | None) -> LeaderBoundDict | None:
            if b is None:
                return None
            return {
                "votes": b.bound.votes,
                "exact": b.bound.exact,
                "estimate": b.bound.estimate,
                "challenger": b.challenger,
            }

        return {
            "pairs": [
                {
                    "rank": p.rank,
                    "upper": p.upper,
                    "lower": p.lower,
                    "gap": p.gap,
                    "removal": bound(p.removal),
                    "flip": bound(p.flip),
                }
                for p in self.pairs
            ],
            "leader": self.leader,
            "leader_removal": leader(self.leader_removal),
            "leader_flip": leader(self.leader_flip),
            "n_battles": self.n_battles,
            "refits": self.refits,
            "top": self.top,
            "method": METHOD,
        }


METHOD = "influence-ordered greedy search, each count verified by refitting"


@dataclass(frozen=True)
class _Setup:
    """What every search of one fit shares: the rows, the fit, per-row pieces, ``H^-1``."""

    battles: Battles
    rows: bt.Rows
    full: bt.Fit
    mult: FloatArray  # (R,) battles per row
    prob: FloatArray  # (R,) p at the fit
    resid: FloatArray  # (R,) c (y - p) per battle
    a_points: FloatArray  # (P,) weighted points of side A per pair
    b_points: FloatArray  # (P,) of side B
    hinv: FloatArray  # (p + k, p + k) inverse of the reduced Hessian, 0 on the reference


def _contrast(setup: _Setup, u: FloatArray) -> FloatArray:
    """``u . x_r`` for every row, ``x_r = (e_a - e_b, f_r)``."""
    rows = setup.rows
    p = rows.n_models
    out = np.repeat(u[rows.pair_a] - u[rows.pair_b], rows.lengths)
    if rows.features is not None:
        out += u[p:] @ rows.features
    return out


def _setup(battles: Battles, rows: bt.Rows, full: bt.Fit) -> _Setup:
    p = rows.n_models
    z = np.repeat(full.theta[rows.pair_a] - full.theta[rows.pair_b], rows.lengths)
    if rows.features is not None:
        z += full.theta[p:] @ rows.features
    prob = bt.expit(z)
    mult = battles.mult
    size = len(full.theta)
    keep = np.arange(size) != full.reference
    hinv = np.zeros((size, size))
    hinv[np.ix_(keep, keep)] = np.linalg.inv(full.hessian[np.ix_(keep, keep)])
    return _Setup(
        battles,
        rows,
        full,
        mult,
        prob,
        rows.c * (rows.y - prob) / mult,
        np.add.reduceat(rows.c * rows.y, rows.starts),
        np.add.reduceat(rows.c * (1.0 - rows.y), rows.starts),
        hinv,
    )


@dataclass(frozen=True)
class _Order:
    """The greedy order of one pair and kind: rows by per-battle effect, most negative first."""

    rows: IntArray  # row indices
    per_battle: FloatArray  # effect of one battle of each row (logits of gap)
    cum_votes: FloatArray
    cum_effect: FloatArray

    @property
    def total(self) -> int:
        return int(round(self.cum_votes[-1])) if len(self.cum_votes) else 0

    def estimate(self, gap: float) -> int | None:
        """The shortest prefix whose first-order effect reaches ``-gap``; None if none does."""
        reach = np.flatnonzero(self.cum_effect <= -gap)
        if not len(reach):
            return None
        r = int(reach[0])
        before_votes = float(self.cum_votes[r - 1]) if r else 0.0
        before_effect = float(self.cum_effect[r - 1]) if r else 0.0
        need = math.ceil((-gap - before_effect) / float(self.per_battle[r]) - 1e-9)
        return round(before_votes) + max(1, need)

    def take(self, k: int) -> tuple[IntArray, FloatArray]:
        """The rows the prefix of ``k`` battles touches, and the battles it takes from each."""
        counts = np.diff(np.r_[0.0, self.cum_votes])
        full = int(np.searchsorted(self.cum_votes, k, side="right"))
        rest = k - (float(self.cum_votes[full - 1]) if full else 0.0)
        if rest > 0 and full < len(self.rows):
            return self.rows[: full + 1], np.r_[counts[:full], rest]
        return self.rows[:full], counts[:full]


def _order(setup: _Setup, i: int, j: int, kind: Kind) -> _Order:
    """The greedy order for the pair ``(i, j)``: the battles that narrow the gap, most first.

    Only a prefix is sorted: the smallest effects are selected by ``np.argpartition`` (linear
    time), enough of them to cover four times the first-order estimate (the search's furthest
    first step), or every narrowing battle when the estimate needs them all.
    """
    rows = setup.rows
    gap = float(setup.full.theta[i] - setup.full.theta[j])
    e = np.zeros(len(setup.full.theta))
    e[i], e[j] = 1.0, -1.0
    ux = _contrast(setup, setup.hinv @ e)
    if kind == "removal":
        effect = -setup.resid * ux
    else:
        effect = (rows.c / setup.mult) * (1.0 - 2.0 * rows.y) * ux
    n_negative = int(np.count_nonzero(effect < 0))
    size = min(n_negative, 256)
    while True:
        if size >= n_negative:
            chosen = np.flatnonzero(effect < 0)
        else:
            chosen = np.argpartition(effect, size)[:size]
        prefix = chosen[np.argsort(effect[chosen], kind="stable")]
        counts = setup.mult[prefix]
        found = _Order(
            prefix, effect[prefix], np.cumsum(counts), np.cumsum(effect[prefix] * counts)
        )
        estimate = found.estimate(gap)
        if size >= n_negative or (estimate is not None and found.total >= 4 * estimate):
            return found
        size *= 4


def _modified(
    setup: _Setup, at: IntArray, taken: FloatArray, kind: Kind
) -> tuple[bt.Rows, FloatArray]:
    """The rows with ``taken`` battles of rows ``at`` removed or flipped, and the change in the
    gradient of ``l`` at the full fit (for the warm start); only the touched rows are read."""
    rows = setup.rows
    share = taken / setup.mult[at]
    c = rows.c[at]
    if kind == "removal":
        new_c, new_c2 = rows.c.copy(), rows.c2.copy()
        new_c[at] *= 1.0 - share
        new_c2[at] *= 1.0 - share
        changed = replace(rows, c=new_c, c2=new_c2)
        weights = -share * c * (rows.y[at] - setup.prob[at])
    else:
        y = rows.y.copy()
        y[at] += share * (1.0 - 2.0 * rows.y[at])
        changed = replace(rows, y=y)
        weights = share * c * (1.0 - 2.0 * rows.y[at])
    return changed, _sparse_sum(setup, at, weights)


def _sparse_sum(setup: _Setup, at: IntArray, w: FloatArray) -> FloatArray:
    """``sum_r w_r x_r`` over the rows ``at`` only, as a (p + k) vector."""
    rows = setup.rows
    p = rows.n_models
    pair = setup.battles.row_pair[at]
    out = np.zeros(p + rows.k)
    out[:p] = np.bincount(rows.pair_a[pair], w, p) - np.bincount(rows.pair_b[pair], w, p)
    if rows.features is not None:
        out[p:] = rows.features[:, at] @ w
    return out


def _check_identified(setup: _Setup, at: IntArray, changed: bt.Rows) -> None:
    """``bt.check_identified`` on the changed rows, from the full data's points per pair less
    the touched rows' (no pass over every row)."""
    rows = setup.rows
    pair = setup.battles.row_pair[at]
    n_pairs = rows.n_pairs
    a_points = setup.a_points + np.bincount(
        pair, changed.c[at] * changed.y[at] - rows.c[at] * rows.y[at], n_pairs
    )
    b_points = setup.b_points + np.bincount(
        pair, changed.c[at] * (1 - changed.y[at]) - rows.c[at] * (1 - rows.y[at]), n_pairs
    )
    adjacency = scored_against(rows.n_models, rows.pair_a, rows.pair_b, a_points, b_points)
    if not strongly_connected(adjacency):
        raise CannotRateError("the changed votes have no maximum-likelihood ratings")


class _Counter:
    def __init__(self) -> None:
        self.refits = 0


#: Chord iterations at most before a refit falls back to Newton's method (``bt.fit``).
CHORD_ITER = 12


@dataclass
class _Refit:
    """A refit in progress: the changed rows, where the iteration is, whether it converged."""

    rows: bt.Rows
    theta: FloatArray
    converged: bool = False


def _iterate(setup: _Setup, state: _Refit, pair: tuple[int, int] | None) -> None:
    """Advance ``state`` towards the maximum of ``l`` on its rows, to ``bt.fit``'s criterion
    (max|grad| < ``bt.TOL``), or with ``pair`` only until the sign of its gap is settled.

    Chord iterations ``theta += H^-1 g`` with the full fit's Hessian: a change of a few votes
    barely moves the Hessian, so each costs one gradient (no Hessian assembly) and shrinks the
    gradient by a large factor ``r``. The sign is settled when the gap after a step exceeds
    four times the estimated rest of the way, ``|step of the gap| r / (1 - r)`` (as the
    bootstrap's replicates stop in ``bt``). When the iteration does not contract (``r`` above
    1/2, or ``CHORD_ITER`` steps), Newton's method (``bt.fit``) finishes the fit.
    """
    theta = state.theta
    previous = math.inf
    for _ in range(CHORD_ITER):
        g = bt.gradient(state.rows, theta)
        size = float(np.max(np.abs(g)))
        if size < bt.TOL:
            state.converged = True
            return
        ratio = size / previous
        if ratio > 0.5:
            break
        previous = size
        step = setup.hinv @ g
        theta += step
        if pair is not None and ratio < 0.5:
            i, j = pair
            rest = abs(step[i] - step[j]) * ratio / (1.0 - ratio)
            if abs(theta[i] - theta[j]) > 4.0 * rest:
                return
    state.theta = bt.fit(state.rows, theta0=theta).theta
    state.converged = True


def _refit(
    setup: _Setup, i: int, j: int, order: _Order, k: int, kind: Kind, *, settle: bool
) -> _Refit | None:
    """The refit with the first ``k`` battles of ``order`` removed or flipped (``settle``: only
    until the sign of the gap ``theta_i - theta_j`` is settled); None when the changed votes
    have no ratings, or no fit."""
    at, taken = order.take(k)
    changed, dg = _modified(setup, at, taken, kind)
    state = _Refit(changed, setup.full.theta + setup.hinv @ dg)
    try:
        _check_identified(setup, at, changed)
        _iterate(setup, state, (i, j) if settle else None)
    except (CannotRateError, np.linalg.LinAlgError):
        return None
    return state


def _search(
    setup: _Setup, i: int, j: int, kind: Kind, counter: _Counter, max_refits: int
) -> Bound | None:
    """The smallest verified swapping prefix found: refits at the first-order estimate, then
    at the secant (false-position) guesses from the refitted gaps, bracketing the threshold
    between the largest prefix known to keep the order and the smallest known to swap it."""
    gap = float(setup.full.theta[i] - setup.full.theta[j])
    order = _order(setup, i, j, kind)
    total = order.total
    if total == 0:
        return None
    estimate = order.estimate(gap)
    k = min(max(1, estimate if estimate is not None else total), total)
    lo, lo_gap = 0, gap  # the largest prefix known to keep the order, and its gap
    hi, hi_gap = 0, 0.0  # the smallest known to swap it (0: none yet)
    ceiling = total  # prefixes above this leave the votes without ratings
    best: _Refit | None = None
    for _ in range(max_refits):
        counter.refits += 1
        state = _refit(setup, i, j, order, k, kind, settle=True)
        if state is None:
            # No ratings exist without these votes (a model keeps only wins, say): look below.
            ceiling = k - 1
        elif (after := float(state.theta[i] - state.theta[j])) < 0:
            hi, hi_gap, best = k, after, state
        else:
            lo, lo_gap = k, after
        if hi and hi - lo <= 1:
            break
        if hi:
            crossing = lo + (hi - lo) * lo_gap / (lo_gap - hi_gap)
            k = min(hi - 1, max(lo + 1, math.ceil(crossing)))
        elif state is None:
            k = (lo + ceiling + 1) // 2
        else:
            moved = gap - lo_gap
            guess = math.ceil(k * gap / moved) if moved > 0 else 2 * k
            k = min(ceiling, max(k + 1, min(guess, 4 * k)))
        if k <= lo or k > ceiling:
            break
    if best is None:
        return None
    # The count reported is the one whose refit, run to the board's criterion, swaps the pair.
    try:
        _iterate(setup, best, None)
    except (CannotRateError, np.linalg.LinAlgError):
        return None
    if not best.theta[i] - best.theta[j] < 0:
        return None
    return Bound(votes=hi, exact=hi == 1, estimate=estimate)


def audit(
    battles: Battles,
    rows: bt.Rows,
    full: bt.Fit,
    ranked: Sequence[int],
    *,
    top: int = TOP,
    max_refits: int = MAX_REFITS,
    points_per_logit: float = 1.0,
) -> Fragility:
    """The fragility of the ranks of ``ranked`` (model indices in rating order, best first; the
    established, shown models), for the first ``top`` of them. See the module's docstring."""
    chosen = list(ranked[:top])
    counter = _Counter()
    names = battles.models
    if len(chosen) < 2:
        return Fragility((), None, None, None, battles.n_battles, 0, top)
    setup = _setup(battles, rows, full)
    pairs = []
    for position, (i, j) in enumerate(zip(chosen, chosen[1:], strict=False), start=1):
        bounds = {kind: _search(setup, i, j, kind, counter, max_refits) for kind in KINDS}
        pairs.append(
            PairFragility(
                rank=position,
                upper=names[i],
                lower=names[j],
                gap=points_per_logit * float(full.theta[i] - full.theta[j]),
                removal=bounds["removal"],
                flip=bounds["flip"],
            )
        )
    leader = chosen[0]
    best: dict[Kind, LeaderBound | None] = {}
    for kind in KINDS:
        first = pairs[0].removal if kind == "removal" else pairs[0].flip
        current = None if first is None else LeaderBound(first, names[chosen[1]])
        gap_of = {j: float(full.theta[leader] - full.theta[j]) for j in chosen[2:]}
        estimates = []
        for j in chosen[2:]:
            estimate = _order(setup, leader, j, kind).estimate(gap_of[j])
            if estimate is not None:
                estimates.append((estimate, j))
        for estimate, j in sorted(estimates)[:LEADER_CHALLENGERS]:
            if current is not None and estimate >= current.bound.votes:
                continue
            found = _search(setup, leader, j, kind, counter, max_refits)
            if found is not None and (current is None or found.votes < current.bound.votes):
                current = LeaderBound(found, names[j])
        best[kind] = current
    return Fragility(
        pairs=tuple(pairs),
        leader=names[leader],
        leader_removal=best["removal"],
        leader_flip=best["flip"],
        n_battles=battles.n_battles,
        refits=counter.refits,
        top=top,
    )
