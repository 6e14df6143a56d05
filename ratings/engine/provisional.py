"""Why a model is not rated yet, as a value: the leaf type ``identify`` produces and ``errors``
carries, imported by both (so that neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

#: Why a model is not rated; a closed vocabulary (see the module docstring).
ProvisionalReason = Literal["no_losses", "no_wins", "not_connected"]
PROVISIONAL_REASONS: tuple[ProvisionalReason, ...] = ("no_losses", "no_wins", "not_connected")


class ProvisionalDict(TypedDict):
    model: str
    battles: int
    wins: int
    losses: int
    ties: int
    reason: ProvisionalReason


@dataclass(frozen=True)
class Provisional:
    """A model that cannot be rated yet, its whole record and why."""

    model: str
    battles: int
    wins: int
    losses: int
    ties: int
    reason: ProvisionalReason

    def as_dict(self) -> ProvisionalDict:
        return {
            "model": self.model,
            "battles": self.battles,
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
            "reason": self.reason,
        }
