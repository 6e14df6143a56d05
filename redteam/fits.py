"""Robustness snapshots: the ended attempts in, one immutable ``RobustnessSnapshot`` out.

Outcomes: ``succeeded`` is a success (1); ``surrendered`` and ``expired`` are failures (0);
``errored``, ``open`` and flagged attempts stay out. A run writes a snapshot only when an
attempt ended after the newest snapshot's ``high_water`` (a rerun on the same attempts is a
no-op). Players are keyed by player id; a pseudonym is shown only for ``PlayerProfile.on_board``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max

from ratings.engine.errors import CannotRateError
from ratings.engine.redteam import fit_robustness
from redteam.models import (
    FAILURE_STATES,
    SUCCESS_STATES,
    Attempt,
    PlayerProfile,
    RobustnessSnapshot,
)


@dataclass(frozen=True)
class RefitResult:
    snapshot: RobustnessSnapshot | None
    created: bool


def _rated_attempts() -> Any:
    return Attempt.objects.filter(
        state__in=[*SUCCESS_STATES, *FAILURE_STATES], flagged=False, ended_at__isnull=False
    )


def robustness_refit(*, force: bool = False) -> RefitResult:
    """Fit the ended attempts and write a snapshot, unless nothing ended since the last one."""
    attempts = _rated_attempts()
    high_water = attempts.aggregate(h=Max("ended_at"))["h"]
    latest = RobustnessSnapshot.objects.order_by("-created_at").first()
    if not force and latest is not None and latest.high_water == high_water:
        return RefitResult(latest, False)
    rows = list(attempts.values_list("player_id", "model__slug", "challenge__slug", "state"))
    payload: dict[str, Any] = {"models": [], "challenges": [], "players": [], "excluded": []}
    if rows:
        try:
            fit = fit_robustness(
                [r[0] for r in rows],
                [r[1] for r in rows],
                [r[2] for r in rows],
                [r[3] == Attempt.State.SUCCEEDED for r in rows],
            )
        except CannotRateError as exc:
            payload["error"] = str(exc)
        else:
            board = dict(
                PlayerProfile.objects.filter(on_board=True).values_list("player_id", "pseudonym")
            )
            payload["models"] = [_row(e, "robustness") for e in fit.models]
            payload["challenges"] = [_row(e, "difficulty") for e in fit.challenges]
            payload["players"] = [
                {**_row(e, "skill"), "player_id": e.name, "pseudonym": board.get(e.name)}
                for e in fit.players
            ]
            payload["excluded"] = [asdict(e) for e in fit.excluded]
            payload["interval"] = fit.interval
            payload["iterations"] = fit.iterations
    with transaction.atomic():
        snapshot = RobustnessSnapshot.objects.create(
            n_attempts=len(rows), high_water=high_water, payload=payload
        )
    return RefitResult(snapshot, True)


def _row(e: Any, label: str) -> dict[str, Any]:
    return {
        "name": e.name,
        label: e.estimate,
        "se": e.se,
        "lower": e.lower,
        "upper": e.upper,
        "attempts": e.attempts,
        "successes": e.successes,
    }
