"""Which models can be rated: the part of the comparison graph where ratings exist.

Bradley-Terry maximum-likelihood ratings exist, finite and unique up to a shift, exactly when
the directed graph "a scored against b" (a won or tied against b; a tie is half a win, so it
gives an edge both ways) is strongly connected: every model has, directly or through others,
beaten and lost to every other (Zermelo 1929, "Die Berechnung der Turnier-Ergebnisse als ein
Maximumproblem der Wahrscheinlichkeitsrechnung", Math. Z. 29; Ford 1957, "Solution of a ranking
problem from binary comparisons", Amer. Math. Monthly 64). Where it is not, some ratings run off
to plus or minus infinity, and groups that never met have no common scale.

The rule used here:

- The **rated set** is the largest strongly connected component of that graph. Ties in size go
  to the component with more battles among its members, then to the one whose alphabetically
  first member comes first. It is rated with the battles among its members only; by the
  result above that fit exists, and a battle against a model outside the set cannot move it
  (it would add a term whose maximum is at infinity).
- Every other model is **provisional**, listed with its whole record and one reason:

  ``not_connected``
      no chain of battles links it to the rated set in a direction that orders it: it never
      met the rated set (it is outside its undirected component), or met it only through
      provisional models that beat (or lost to) both, and its record has both wins and losses.
  ``no_losses``
      it scored against the rated set (directly or through others) but the rated set never
      scored against it: it won, or won and tied along the way. Its rating has no upper bound.
  ``no_wins``
      the reverse: the rated set scored against it, it never scored back. No lower bound.

  A model linked to the rated set in neither direction with a one-sided record takes the
  reason of its record (``no_losses`` if it never lost or tied, ``no_wins`` if it never won or
  tied). When fewer than two models can be rated, every model is provisional; the members of
  the (single-model) largest component take their reason from their record the same way.

Everything is computed on the p x p boolean "scored against" matrix (p models, not n battles):
reachability from the best-connected model by breadth-first matrix-vector steps settles the
common, strongly connected case; otherwise the transitive closure by repeated squaring
(log2 p products of p x p matrices) gives every component at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .data import Battles, FloatArray
from .provisional import Provisional, ProvisionalReason

BoolMatrix = NDArray[np.bool_]


@dataclass(frozen=True)
class Record:
    """A model's whole record in the battles given (both kinds of tie are ties)."""

    model: str
    battles: int
    wins: int
    losses: int
    ties: int


@dataclass(frozen=True)
class Identification:
    """The split of the models into the rated set and the provisional ones.

    ``rated_mask`` marks the rated set (the largest strongly connected component; all false
    when it has fewer than two models, see ``ratable``); ``provisional`` holds every other
    model, most battles first, then by name. ``records`` has every model's record, in
    ``models`` order, when some model is provisional or when asked for (else it is empty).
    """

    models: tuple[str, ...]
    rated_mask: NDArray[np.bool_]
    provisional: tuple[Provisional, ...]
    records: tuple[Record, ...]  # every model, in ``models`` order

    @property
    def rated(self) -> tuple[str, ...]:
        return tuple(m for m, keep in zip(self.models, self.rated_mask, strict=True) if keep)

    @property
    def ratable(self) -> bool:
        return int(self.rated_mask.sum()) >= 2

    @property
    def everyone_rated(self) -> bool:
        return bool(self.rated_mask.all())

    def reason_text(self) -> str:
        """One line saying why no ratings exist (when ``ratable`` is false)."""
        by_reason: dict[str, list[str]] = {}
        for entry in self.provisional:
            by_reason.setdefault(entry.reason, []).append(entry.model)
        parts = [
            f"{reason}: {', '.join(names[:5])}{' and others' if len(names) > 5 else ''}"
            for reason, names in sorted(by_reason.items())
        ]
        return (
            "no two models can be rated: maximum-likelihood ratings need models that have each "
            "beaten and lost to the others, directly or through others (a tie counts as both); "
            + "; ".join(parts)
        )


def scored_against(
    n_models: int,
    pair_a: NDArray[np.int64],
    pair_b: NDArray[np.int64],
    a_points: FloatArray,
    b_points: FloatArray,
) -> BoolMatrix:
    """``adjacency[i, j]``: model i won or tied against j at least once (weights > 0)."""
    adjacency = np.zeros((n_models, n_models), dtype=bool)
    adjacency[pair_a[a_points > 0], pair_b[a_points > 0]] = True
    adjacency[pair_b[b_points > 0], pair_a[b_points > 0]] = True
    return adjacency


def reachable(adjacency: BoolMatrix, start: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """Nodes reachable from the ``start`` set along directed edges (breadth-first, matvecs)."""
    seen = start.copy()
    frontier = seen.copy()
    while frontier.any():
        frontier = adjacency[frontier].any(axis=0) & ~seen
        seen |= frontier
    return seen


def closure(adjacency: BoolMatrix) -> BoolMatrix:
    """Reflexive transitive closure by repeated squaring: log2(p) small matrix products."""
    p = adjacency.shape[0]
    reach = adjacency | np.eye(p, dtype=bool)
    while True:
        as_float = reach.astype(np.float32)
        grown = (as_float @ as_float) > 0
        if (grown == reach).all():
            return reach
        reach = grown


def strongly_connected(adjacency: BoolMatrix) -> bool:
    """Whether every node reaches every other (forward and backward search from node 0)."""
    p = adjacency.shape[0]
    start = np.zeros(p, dtype=bool)
    start[0] = True
    return bool(reachable(adjacency, start).all() and reachable(adjacency.T, start).all())


def _records(battles: Battles) -> tuple[Record, ...]:
    p = battles.n_models
    row_a = battles.pair_a[battles.row_pair]
    row_b = battles.pair_b[battles.row_pair]
    mult = battles.mult
    a_won = mult * (battles.y == 1.0)
    b_won = mult * (battles.y == 0.0)
    tied = mult * (battles.y == 0.5)
    wins = np.bincount(row_a, a_won, p) + np.bincount(row_b, b_won, p)
    losses = np.bincount(row_a, b_won, p) + np.bincount(row_b, a_won, p)
    ties = np.bincount(row_a, tied, p) + np.bincount(row_b, tied, p)
    return tuple(
        Record(
            model=battles.models[i],
            battles=int(round(wins[i] + losses[i] + ties[i])),
            wins=int(round(wins[i])),
            losses=int(round(losses[i])),
            ties=int(round(ties[i])),
        )
        for i in range(p)
    )


def _own_reason(record: Record) -> ProvisionalReason:
    if record.losses == 0 and record.ties == 0:
        return "no_losses"
    if record.wins == 0 and record.ties == 0:
        return "no_wins"
    return "not_connected"


def _largest_component(
    battles: Battles, adjacency: BoolMatrix
) -> tuple[NDArray[np.bool_], BoolMatrix]:
    """The chosen component's mask and the closure it came from."""
    p = battles.n_models
    reach = closure(adjacency)
    component = reach & reach.T
    # Each model's component is labelled by its first member; names are sorted, so the first
    # member is also the alphabetically first one.
    label = np.argmax(component, axis=1)
    sizes = np.bincount(label, minlength=p)
    per_pair = np.add.reduceat(battles.mult, battles.starts)
    inside = label[battles.pair_a] == label[battles.pair_b]
    within = np.bincount(label[battles.pair_a][inside], per_pair[inside], minlength=p)
    roots = np.flatnonzero(sizes)
    # Largest size, then most battles among members, then the first name.
    best = min(roots, key=lambda r: (-int(sizes[r]), -float(within[r]), int(r)))
    return label == best, reach


def identify(battles: Battles, *, with_records: bool = False) -> Identification:
    """Split the encoded battles' models into the rated set and the provisional ones.

    When every model is rated (the common case) only two breadth-first searches run, and the
    records are counted only if ``with_records``.
    """
    p = battles.n_models
    a_points = np.add.reduceat(battles.mult * battles.y, battles.starts)
    b_points = np.add.reduceat(battles.mult * (1.0 - battles.y), battles.starts)
    adjacency = scored_against(p, battles.pair_a, battles.pair_b, a_points, b_points)
    models = tuple(battles.models)
    if strongly_connected(adjacency):
        return Identification(
            models=models,
            rated_mask=np.ones(p, dtype=bool),
            provisional=(),
            records=_records(battles) if with_records else (),
        )
    rated, reach = _largest_component(battles, adjacency)
    records = _records(battles)
    met = reachable(adjacency | adjacency.T, rated)
    reaches_rated: NDArray[np.bool_] = np.any(reach[:, rated], axis=1)
    reached_by_rated: NDArray[np.bool_] = np.any(reach[rated], axis=0)
    ratable = int(rated.sum()) >= 2
    provisional: list[Provisional] = []
    for i, record in enumerate(records):
        reason: ProvisionalReason
        if rated[i] and ratable:
            continue
        if rated[i]:
            reason = _own_reason(record)
        elif not met[i]:
            reason = "not_connected"
        elif reaches_rated[i]:
            reason = "no_losses"
        elif reached_by_rated[i]:
            reason = "no_wins"
        else:
            reason = _own_reason(record)
        provisional.append(
            Provisional(
                model=record.model,
                battles=record.battles,
                wins=record.wins,
                losses=record.losses,
                ties=record.ties,
                reason=reason,
            )
        )
    provisional.sort(key=lambda e: (-e.battles, e.model))
    return Identification(
        models=models,
        rated_mask=rated if ratable else np.zeros(p, dtype=bool),
        provisional=tuple(provisional),
        records=records,
    )
