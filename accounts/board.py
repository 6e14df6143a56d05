"""A visitor's own leaderboard: a small regularised Bradley-Terry fit in pure Python.

No Django, numpy or pandas (the web process that shows the page loads neither): a visitor has
a few hundred votes at most over a few dozen models, and the fit works on the per-pair counts,
so its cost is iterations x pairs whatever the number of votes.

The model (Bradley 1952; Hunter 2004's MM algorithm): model ``i`` has a strength ``p_i > 0``
and beats ``j`` with probability ``p_i / (p_i + p_j)``. A tie (and a "both are bad" vote) is
half a win for each side, as in the public arena's Elo and Bradley-Terry code. The prior is
Laplace smoothing by virtual games: each model also played two games against a fixed average
model of strength 1, winning one and losing one. Without it a model that won every one of a
visitor's few votes would have an infinite strength; with it, every strength is finite, the
comparison graph is connected through the average model, and the fit is unique.

Hunter's MM update with the virtual games, for each model in turn over the same sweep:

    p_i <- (W_i + 1) / (sum_j n_ij / (p_i + p_j) + 2 / (p_i + 1))

``W_i`` the (half-)wins of ``i``, ``n_ij`` the games of ``i`` and ``j``. It increases the
penalised likelihood at every step; the sweep stops when no strength moves by more than
``TOLERANCE`` relative to itself, or after ``MAX_SWEEPS``. The rating shown is on the Elo
scale of the public leaderboard: ``1000 + 400 log10(p_i)``, 1000 being the average model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["model_a", "model_b", "tie", "tie (bothbad)"]

TOLERANCE = 1e-10
MAX_SWEEPS = 10_000
VIRTUAL_GAMES = 2  # one won, one lost, against the average model of strength 1
ELO_PER_DECADE = 400.0
ELO_CENTRE = 1000.0


@dataclass(frozen=True)
class Game:
    """One vote as the fit reads it: the two models (any hashable names) and the verdict."""

    model_a: str
    model_b: str
    winner: Outcome


@dataclass(frozen=True)
class BoardRow:
    """One model of a visitor's board, ranked by ``rating`` (1 is the best)."""

    model: str
    rank: int
    rating: float
    wins: int
    ties: int
    losses: int

    @property
    def games(self) -> int:
        return self.wins + self.ties + self.losses


@dataclass(frozen=True)
class Board:
    """The fit's result: one row per model met, best first; ``sweeps`` is how many MM sweeps
    it took (``converged`` False only if ``MAX_SWEEPS`` ran out first)."""

    rows: list[BoardRow]
    games: int
    sweeps: int
    converged: bool


def board_fit(games: Iterable[Game]) -> Board:
    """The regularised Bradley-Terry board of ``games`` (see the module's docstring).

    A game of a model against itself counts for nothing. Rows are ordered by rating, then by
    name; models of equal rating (to a millionth of a point) share the better rank.
    """
    wins: dict[str, float] = {}
    record: dict[str, list[int]] = {}  # model -> [wins, ties, losses]
    pairs: dict[tuple[str, str], int] = {}
    counted = 0
    for game in games:
        a, b = game.model_a, game.model_b
        if a == b:
            continue
        counted += 1
        for model in (a, b):
            wins.setdefault(model, 0.0)
            record.setdefault(model, [0, 0, 0])
        key = (a, b) if a < b else (b, a)
        pairs[key] = pairs.get(key, 0) + 1
        if game.winner == "model_a":
            wins[a] += 1.0
            record[a][0] += 1
            record[b][2] += 1
        elif game.winner == "model_b":
            wins[b] += 1.0
            record[b][0] += 1
            record[a][2] += 1
        else:
            wins[a] += 0.5
            wins[b] += 0.5
            record[a][1] += 1
            record[b][1] += 1

    opponents: dict[str, list[tuple[str, int]]] = {model: [] for model in wins}
    for (a, b), n in pairs.items():
        opponents[a].append((b, n))
        opponents[b].append((a, n))

    strength = dict.fromkeys(wins, 1.0)
    sweeps = 0
    converged = not strength
    while not converged and sweeps < MAX_SWEEPS:
        sweeps += 1
        moved = 0.0
        for model, met in opponents.items():
            p = strength[model]
            denominator = sum(n / (p + strength[other]) for other, n in met)
            denominator += VIRTUAL_GAMES / (p + 1.0)
            new = (wins[model] + VIRTUAL_GAMES / 2) / denominator
            moved = max(moved, abs(new - p) / p)
            strength[model] = new
        converged = moved <= TOLERANCE

    rated = sorted(
        ((ELO_CENTRE + ELO_PER_DECADE * math.log10(strength[m]), m) for m in strength),
        key=lambda pair: (-round(pair[0], 6), pair[1]),
    )
    rows: list[BoardRow] = []
    for position, (rating, model) in enumerate(rated, start=1):
        rank = position
        if rows and round(rows[-1].rating, 6) == round(rating, 6):
            rank = rows[-1].rank
        w, t, lost = record[model]
        rows.append(BoardRow(model=model, rank=rank, rating=rating, wins=w, ties=t, losses=lost))
    return Board(rows=rows, games=counted, sweeps=sweeps, converged=converged)
