"""Reads for what the arena publishes about itself: votes left out and why, models served.

The page also shows how recognisable each active model's pool answers are
(``pool_recognisability``: ``arena.recognisability`` over the pool, kept in the shared cache per
pool generation, so it is computed once per change of the pool, not per visit).

The leaderboard's snapshot counts the votes it excludes (``votes_excluded_counts``: named,
flagged, and repeated visitors' prompts past the cap) and the
public ``/transparency`` page (``ratings.views``) lists every model served with its dates and
shares. Each read is a fixed number of aggregate queries, whatever the number of models.
Environment battles (``Battle.Source.ENV``: a trainer's completions judged by visitors) are
never counted with the arena's own; their hidden models (``EnvRun.model``) appear only in one
aggregated line (``trainer_submissions``).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Max, Min, QuerySet

from arena.leaks import model_names, names_in_answer
from arena.models import ArenaModel, Battle, Completion, Vote
from arena.pool_cache import pool_cache
from arena.recognisability import ModelRecognisability, PoolAnswer, recognisability
from arena.selectors import (
    RepeatedPrompts,
    SourceCap,
    SourceCapped,
    repeated_prompt_counts,
    source_capped_counts,
)
from arena.services.bridge import bridge_models

#: The label of a flagged vote whose list of reasons is empty (a flag set by hand, say).
UNSPECIFIED_REASON = "unspecified"
#: How long the pool's recognisability figures are kept for one pool generation (a change of
#: the pool starts another generation, whose figures are computed on the next read).
RECOGNISABILITY_CACHE_SECONDS = 7 * 24 * 3600
_RECOGNISABILITY_KEY = "arena:recognisability:v1:{generation}"
# One computation at a time, whatever the generations: every model saved (an environment run's
# hidden model too) starts a generation, and each would queue minutes of work. The flag is
# cleared when a computation ends, and lapses after this long (a lost task is queued again).
_RECOGNISABILITY_QUEUED = "arena:recognisability:v1:queued"
_RECOGNISABILITY_QUEUED_SECONDS = 600
# By name: the arena's tasks module imports this one.
RECOGNISABILITY_TASK = "arena.tasks.pool_recognisability"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExcludedVotes:
    """Votes the leaderboard leaves out: named ones, and flagged anonymous ones by reason."""

    named: int
    flagged: int
    by_reason: dict[str, int]
    repeated: RepeatedPrompts = field(default_factory=lambda: RepeatedPrompts(0, 0))
    source_capped: SourceCapped = field(default_factory=lambda: SourceCapped(0, 0))


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


def votes_excluded_counts(
    *, duplicate_cap: int = 0, source_cap: SourceCap | None = None
) -> ExcludedVotes:
    """What ``arena.selectors.votes_for_rating(duplicate_cap=...)`` leaves out, counted: named
    votes, flagged ones, the copies of repeated visitors' prompts past the cap, and the votes
    past their source's cap (``source_cap``)."""
    votes = _arena_votes()
    named = votes.exclude(battle__mode=Battle.Mode.ANONYMOUS).count()
    flagged, by_reason = flag_reason_counts(votes.filter(battle__mode=Battle.Mode.ANONYMOUS))
    return ExcludedVotes(
        named=named,
        flagged=flagged,
        by_reason=by_reason,
        repeated=repeated_prompt_counts(cap=duplicate_cap),
        source_capped=source_capped_counts(
            cap=source_cap or SourceCap(), duplicate_cap=duplicate_cap
        ),
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


def served_summary_json(summary: ServedSummary) -> dict[str, Any]:
    """``summary`` as JSON (dates in ISO 8601), for a leaderboard snapshot to keep: the
    /transparency page reads it back (``served_summary_from_json``) instead of counting."""
    data = asdict(summary)
    for model in data["models"]:
        model["first_battle"] = model["first_battle"].isoformat()
        model["last_battle"] = model["last_battle"].isoformat()
    return data


def served_summary_from_json(data: dict[str, Any]) -> ServedSummary:
    """The ``ServedSummary`` that ``served_summary_json`` wrote."""
    return ServedSummary(
        models=[
            ServedModel(
                **{
                    **m,
                    "first_battle": datetime.fromisoformat(m["first_battle"]),
                    "last_battle": datetime.fromisoformat(m["last_battle"]),
                }
            )
            for m in data["models"]
        ],
        battles=int(data["battles"]),
        votes=int(data["votes"]),
        flagged=int(data["flagged"]),
        flagged_by_reason=dict(data["flagged_by_reason"]),
        trainer=TrainerSubmissions(**data["trainer"]),
        # The label in the reader's language, not the writer's.
        by_source=[
            SourceCount(
                source=s["source"],
                label=str(Battle.Source(s["source"]).label),
                battles=int(s["battles"]),
                votes=int(s["votes"]),
            )
            for s in data["by_source"]
        ],
    )


def pool_answers() -> list[PoolAnswer]:
    """Every pool answer of the active models, variants in the order they were stored (the
    first is the published one), with whether its text names its model (``arena.leaks``)."""
    models = {m.pk: m for m in ArenaModel.objects.filter(is_active=True, env_run__isnull=True)}
    names = {pk: model_names(m) for pk, m in models.items()}
    rows = (
        Completion.objects.filter(source=Completion.Source.POOL, model_id__in=models)
        .order_by("pk")
        .values_list("prompt_id", "model_id", "turns", "prompt__turns")
    )
    answers = []
    for prompt_id, model_id, turns, user_turns in rows.iterator(chunk_size=2000):
        texts = tuple(str(t) for t in (turns if isinstance(turns, list) else []))
        asked = [str(t) for t in (user_turns if isinstance(user_turns, list) else [])]
        named = any(
            names_in_answer(text, names=names[model_id], user_turns=asked[: turn + 1])
            for turn, text in enumerate(texts)
        )
        answers.append(
            PoolAnswer(
                prompt=prompt_id, model=models[model_id].slug, turns=texts, names_model=named
            )
        )
    return answers


def _recognisability_key(generation: str) -> str:
    return _RECOGNISABILITY_KEY.format(generation=generation)


def pool_recognisability_refresh() -> list[ModelRecognisability]:
    """Compute the pool's recognisability figures and keep them for the pool generation the
    rows were read under (a change meanwhile starts another, whose figures come next)."""
    generation = pool_cache().tokens["pool"]
    figures = recognisability(pool_answers())
    cache.set(_recognisability_key(generation), figures, timeout=RECOGNISABILITY_CACHE_SECONDS)
    cache.delete(_RECOGNISABILITY_QUEUED)  # the next generation's may be queued now
    return figures


def pool_recognisability() -> list[ModelRecognisability] | None:
    """The current pool generation's recognisability figures, or None while they are computed.

    The first read of a generation queues the task that computes them, unless a computation
    is already queued or running (``_RECOGNISABILITY_QUEUED``): the style counts and the classifier need the
    tokenizer and numpy, which a web worker does not load. In eager mode (local settings, no
    broker) the task runs at once and its figures are returned.
    """
    key = _recognisability_key(pool_cache().tokens["pool"])
    kept = cache.get(key)
    if kept is None and cache.add(
        _RECOGNISABILITY_QUEUED, True, timeout=_RECOGNISABILITY_QUEUED_SECONDS
    ):
        try:
            current_app.tasks[RECOGNISABILITY_TASK].apply_async()
        except Exception:
            logger.exception("could not queue the pool's recognisability figures")
        kept = cache.get(key)
    return kept if isinstance(kept, list) else None


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
