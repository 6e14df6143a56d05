"""What the red-team board is made of, counted from the attempts on each visit: how a model is
drawn, every model played with its attempts by outcome, and the attempts the robustness fit
leaves out, with why. Two grouped queries, whatever the number of attempts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count

from arena.models import ArenaModel
from ratings.flag_reasons import flag_reason_label
from redteam.models import FAILURE_STATES, SUCCESS_STATES, Attempt, Challenge


@dataclass(frozen=True)
class ModelPlayed:
    name: str
    attempts: int
    broken: int  # succeeded: the player broke the rule
    held: int  # surrendered or expired
    open: int  # started, never ended
    errored: int
    flagged: int


@dataclass(frozen=True)
class LeftOut:
    open: int
    errored: int
    flagged: int
    flags: list[tuple[str, int]]  # (reason in words, attempts), most first
    # From the newest fit: models and challenges it could not place, by name, and the number of
    # players (never named: only opted-in players are shown anywhere).
    unplaced: list[dict[str, Any]]
    unplaced_players: int


@dataclass(frozen=True)
class RedteamTransparency:
    cap: int  # ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY; 0 is no cap
    cap_per_address: int  # ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY; 0 is no cap
    models: list[ModelPlayed]
    left_out: LeftOut


def redteam_transparency(snapshot_payload: dict[str, Any] | None) -> RedteamTransparency:
    """The board's transparency section; ``snapshot_payload`` is the newest fit's, if any."""
    outcome = {state: "broken" for state in SUCCESS_STATES}
    outcome |= {state: "held" for state in FAILURE_STATES}
    outcome |= {Attempt.State.ERRORED: "errored", Attempt.State.OPEN: "open"}
    per_model: dict[str, Counter[str]] = {}
    rows = (
        Attempt.objects.order_by()
        .values_list("model__display_name", "state", "flagged")
        .annotate(n=Count("id"))
    )
    for name, state, flagged, n in rows:
        counts = per_model.setdefault(name, Counter())
        counts["attempts"] += n
        counts["flagged" if flagged else outcome[state]] += n
    fields = ("attempts", "broken", "held", "open", "errored", "flagged")
    models = sorted(
        (ModelPlayed(name, *(c[f] for f in fields)) for name, c in per_model.items()),
        key=lambda m: (-m.attempts, m.name),
    )
    reasons: Counter[str] = Counter()
    for flags in Attempt.objects.filter(flagged=True).values_list("flags", flat=True):
        reasons.update(flags or ["unknown"])
    excluded = (snapshot_payload or {}).get("excluded", [])
    unplaced = [e for e in excluded if e.get("kind") in ("model", "challenge")]
    if unplaced:  # the fit names them by slug
        names = {
            "model": dict(ArenaModel.objects.values_list("slug", "display_name")),
            "challenge": dict(Challenge.objects.values_list("slug", "title")),
        }
        unplaced = [{**e, "name": names[e["kind"]].get(e["name"], e["name"])} for e in unplaced]
    return RedteamTransparency(
        cap=settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY,
        cap_per_address=settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY,
        models=models,
        left_out=LeftOut(
            open=sum(m.open for m in models),
            errored=sum(m.errored for m in models),
            flagged=sum(m.flagged for m in models),
            flags=[(flag_reason_label(code), n) for code, n in reasons.most_common()],
            unplaced=unplaced,
            unplaced_players=sum(1 for e in excluded if e.get("kind") == "player"),
        ),
    )
