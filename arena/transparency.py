"""Reads for what the arena publishes about itself: votes left out and why, models served.

The leaderboard's snapshot counts the votes it excludes (``votes_excluded_counts``: named,
flagged, and repeated visitors' prompts past the cap) and the
public ``/transparency`` page (``ratings.views``) lists every model served with its dates and
shares. Each read is a fixed number of aggregate queries, whatever the number of models.
Environment battles (``Battle.Source.ENV``: a trainer's completions judged by visitors) are
never counted with the arena's own; their hidden models (``EnvRun.model``) appear only in one
aggregated line (``trainer_submissions``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Max, Min, QuerySet

from arena.models import ArenaModel, Battle, Vote
from arena.pool_cache import pool_cache
from arena.selectors import RepeatedPrompts, repeated_prompt_counts
from arena.services.bridge import bridge_models

#: The label of a flagged vote whose list of reasons is empty (a flag set by hand, say).
UNSPECIFIED_REASON = "unspecified"


@dataclass(frozen=True)
class ExcludedVotes:
    """Votes the leaderboard leaves out: named ones, and flagged anonymous ones by reason."""

    named: int
    flagged: int
    by_reason: dict[str, int]
    repeated: RepeatedPrompts = field(default_factory=lambda: RepeatedPrompts(0, 0))


def _arena_votes() -> QuerySet[Vote]:
    return Vote.objects.exclude(battle__source=Battle.Source.ENV)


def flag_reason_counts(votes: QuerySet[Vote]) -> tuple[int, dict[str, int]]:
    """Flagged votes among ``votes``, and per reason (a vote with two reasons counts twice).

    One query grouped by the list of reasons: there are few distinct lists, whatever the count.
    """
    total = 0
    reasons: Counter[str] = Counter()
    for row in votes.filter(flagged=True).order_by().values("flags").annotate(n=Count("id")):
        flags = row["flags"] if isinstance(row["flags"], list) else []
        total += row["n"]
        for reason in sorted({str(f) for f in flags}) or [UNSPECIFIED_REASON]:
            reasons[reason] += row["n"]
    return total, dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))


def votes_excluded_counts(*, duplicate_cap: int = 0) -> ExcludedVotes:
    """What ``arena.selectors.votes_for_rating(duplicate_cap=...)`` leaves out, counted: named
    votes, flagged ones, and the copies of repeated visitors' prompts past the cap."""
    votes = _arena_votes()
    named = votes.exclude(battle__mode=Battle.Mode.ANONYMOUS).count()
    flagged, by_reason = flag_reason_counts(votes.filter(battle__mode=Battle.Mode.ANONYMOUS))
    return ExcludedVotes(
        named=named,
        flagged=flagged,
        by_reason=by_reason,
        repeated=repeated_prompt_counts(cap=duplicate_cap),
    )


@dataclass(frozen=True)
class ServedModel:
    """A model the arena has shown, with its first and last battle and its counts."""

    slug: str
    name: str
    organization: str
    active: bool
    public: bool
    first_battle: datetime
    last_battle: datetime
    battles: int
    votes: int
    sampling_weight: float


@dataclass(frozen=True)
class TrainerSubmissions:
    """Environment runs' hidden models, in one line: how many, and their battles and votes."""

    models: int
    battles: int
    votes: int


@dataclass
class _Tally:
    first: datetime
    last: datetime
    battles: int = 0
    votes: int = 0


@dataclass(frozen=True)
class SourceCount:
    source: str  # a ``Battle.Source`` value
    label: str
    battles: int
    votes: int


@dataclass(frozen=True)
class ServedSummary:
    models: list[ServedModel]
    battles: int  # the arena's own battles (environment battles aside)
    votes: int
    flagged: int
    flagged_by_reason: dict[str, int] = field(default_factory=dict)
    trainer: TrainerSubmissions = field(default_factory=lambda: TrainerSubmissions(0, 0, 0))
    # Battles and votes by source (pool, live, mixed, import), in ``Battle.Source`` order.
    by_source: list[SourceCount] = field(default_factory=list)


def models_served() -> ServedSummary:
    """Every model that was in one of the arena's own battles, deactivated and private ones too.

    Two grouped queries (by side A's model, by side B's) give each model's battles, votes and
    dates; a model that met itself cannot happen (battles pair two different models).
    """
    battles = Battle.objects.exclude(source=Battle.Source.ENV).order_by()
    per_model: dict[int, _Tally] = {}
    for side in ("model_a", "model_b"):
        rows = battles.values(side).annotate(
            n=Count("id"), votes=Count("vote"), first=Min("created_at"), last=Max("created_at")
        )
        for row in rows:
            tally = per_model.setdefault(row[side], _Tally(first=row["first"], last=row["last"]))
            tally.battles += row["n"]
            tally.votes += row["votes"]
            tally.first = min(tally.first, row["first"])
            tally.last = max(tally.last, row["last"])
    found = ArenaModel.objects.filter(pk__in=per_model, env_run__isnull=True)
    served = [
        ServedModel(
            slug=m.slug,
            name=m.display_name,
            organization=m.organization,
            active=m.is_active,
            public=m.is_public,
            first_battle=per_model[m.pk].first,
            last_battle=per_model[m.pk].last,
            battles=per_model[m.pk].battles,
            votes=per_model[m.pk].votes,
            sampling_weight=m.sampling_weight,
        )
        for m in found
    ]
    served.sort(key=lambda m: (-m.battles, m.slug))
    votes = _arena_votes()
    flagged, by_reason = flag_reason_counts(votes)
    env_battles = Battle.objects.filter(source=Battle.Source.ENV).aggregate(
        n=Count("id"), votes=Count("vote")
    )
    counted = {
        row["source"]: row
        for row in battles.values("source").annotate(n=Count("id"), votes=Count("vote"))
    }
    by_source = [
        SourceCount(
            source=value,
            label=str(label),
            battles=int(counted[value]["n"]),
            votes=int(counted[value]["votes"]),
        )
        for value, label in Battle.Source.choices
        if value in counted
    ]
    return ServedSummary(
        by_source=by_source,
        models=served,
        battles=battles.count(),
        votes=votes.count(),
        flagged=flagged,
        flagged_by_reason=by_reason,
        trainer=TrainerSubmissions(
            models=ArenaModel.objects.filter(env_run__isnull=False).count(),
            battles=int(env_battles["n"]),
            votes=int(env_battles["votes"]),
        ),
    )


@dataclass(frozen=True)
class BridgedModel:
    slug: str
    name: str
    public: bool


@dataclass(frozen=True)
class Bridging:
    """Mixed battles in force: the share of pool draws they take while some live model is not
    established, and the live models the draw bridges now (``arena.services.bridge``)."""

    share: float
    models: list[BridgedModel]


def bridging_now() -> Bridging:
    share = float(settings.ARENA_BRIDGE_SHARE)
    found = bridge_models(pool_cache()) if share > 0 else []
    return Bridging(
        share=share,
        models=[BridgedModel(slug=m.slug, name=m.display_name, public=m.is_public) for m in found],
    )
