"""What the public ``/transparency`` page shows, gathered from the data in a fixed number of queries.

- The sampling policy in force (``arena.sampling.stats``): active or not, the floor, the snapshot
  its statistics come from, and for each model that can be drawn now its sampling weight and its
  share of the draws under the policy (the sum of its pairs' probabilities, so shares add to 2).
- Every model the arena has served (``arena.transparency.models_served``), deactivated ones and
  private variants (``is_public`` off) included, with first and last battle dates and shares;
  environment runs' hidden models only as one aggregated line of trainer submissions.
- How recognisable each active model's pool answers are (``arena.recognisability``: by a
  published answer's text under the rotation of variants, by style, by naming the model),
  computed once per change of the pool by a task and read from the shared cache.
- The fit's position term and inverse-propensity weights (``RATINGS_POSITION``,
  ``RATINGS_INVERSE_PROPENSITY``), read from the latest snapshot's overall view: whether they
  were on, and the left side's coefficient with its standard error and interval.
- How fragile the leaderboard's top ranks are (``ratings.engine.fragility``): for each adjacent
  pair of the overall view's top (style control on, else off) and for the leader, the fewest
  votes found whose removal or flip swaps the pair, from the latest snapshot (an older
  snapshot without the audit shows none).
- The fairness ledger (``arena.ledger``), per provider: models tested before their public
  release with their private battles and votes, each model's share of the battle appearances
  against an equal share (all time and the last 30 days), votes and rows of the default export,
  and retirements with their dates and reasons.
- Flagged votes by reason, the leaderboard's excluded votes (from the latest snapshot: named,
  flagged, repeated visitors' prompts past ``RATINGS_DUPLICATE_PROMPT_CAP``) and when
  snapshots are written (the beat schedule's sweep, the after-vote refresh, the latest one).

The models served, the battles and votes by source, the flags by reason and the ledger's counts
are the newest snapshot's (``payload["served"]``, ``payload["ledger"]``, counted by the rating
task when it writes the snapshot), read
once per snapshot into the cache (``ratings.page_cache``), so a visit does not count votes; a
snapshot written before they were kept has them counted once and kept the same way, and before
the first snapshot they are counted on each visit (when there are few votes to count). The
sampling policy and the draw shares follow the models' current weights, read live, and so do
the ledger's changes of standing (a retirement shows at once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, TypedDict

from django.conf import settings

from arena.ledger import (
    Ledger,
    ledger_counts,
    ledger_counts_from_json,
    ledger_counts_json,
    ledger_view,
)
from arena.models import ArenaModel
from arena.recognisability import ModelRecognisability
from arena.sampling.stats import SamplingPolicy, pair_probabilities_now, sampling_policy
from arena.transparency import (
    Bridging,
    ServedSummary,
    bridging_now,
    models_served,
    pool_recognisability,
    served_summary_from_json,
    served_summary_json,
)
from ratings.engine.result import BoundDict, FragilityDict, LeaderBoundDict
from ratings.page_cache import SnapshotHead, snapshot_cached, snapshot_head, snapshot_row
from ratings.payload import ExcludedCounts, SnapshotPayload
from ratings.selectors import snapshot_payload

#: The beat entry that writes snapshots (``config/schedule.py``).
SNAPSHOT_SWEEP = "ratings-snapshot-sweep"
#: How many of the likeliest pairs the page lists.
TOP_PAIRS = 10


@dataclass(frozen=True)
class DrawShare:
    slug: str
    name: str
    public: bool
    weight: float
    share: float  # probability that the next battle shows this model


@dataclass(frozen=True)
class PairShare:
    a: str
    b: str
    probability: float


@dataclass(frozen=True)
class PositionFigures:
    """The latest snapshot's position term (overall view, style control on where rated)."""

    position: bool  # the fit had the position term
    inverse_propensity: bool  # votes were weighted by 1 / P(pair drawn)
    coefficient: float | None  # logits; None when not identified
    standard_error: float | None
    left_wins: float | None  # sigma(coefficient) in percent: the left answer's win chance
    left_lower: float | None  # the same at the interval's ends
    left_upper: float | None


def _percent(logit: float | None) -> float | None:
    return None if logit is None else 100.0 / (1.0 + math.exp(-logit))


def position_figures(payload: dict[str, Any]) -> PositionFigures | None:
    """``PositionFigures`` from a snapshot payload; None when its overall view is not rated."""
    overall = next((c for c in payload.get("categories", []) if c.get("key") == "overall"), None)
    results = (overall or {}).get("results") or {}
    result = results.get("on") or results.get("off")
    if not result:
        return None
    method = result.get("method") or {}
    effect = result.get("position") or {}
    interval = effect.get("interval") or [None, None]
    return PositionFigures(
        position=bool(method.get("position")),
        inverse_propensity=bool(method.get("inverse_propensity")),
        coefficient=effect.get("coefficient"),
        standard_error=effect.get("standard_error"),
        left_wins=_percent(effect.get("coefficient")),
        left_lower=_percent(interval[0]),
        left_upper=_percent(interval[1]),
    )


@dataclass(frozen=True)
class FragileRank:
    """One adjacent pair of the top as the page shows it: names, gap, both counts."""

    rank: int
    upper: str
    lower: str
    gap: float  # rating points
    removal: BoundDict | None
    flip: BoundDict | None


@dataclass(frozen=True)
class LeaderFragility:
    model: str
    removal: LeaderBoundDict | None
    flip: LeaderBoundDict | None
    removal_challenger: str
    flip_challenger: str


@dataclass(frozen=True)
class FragilityView:
    """The overall view's audit: which style setting, its ranks, its leader, its votes."""

    style: str
    ranks: list[FragileRank]
    leader: LeaderFragility | None
    n_battles: int
    refits: int


@dataclass(frozen=True)
class Transparency:
    policy: SamplingPolicy
    draws: list[DrawShare]
    top_pairs: list[PairShare]
    n_pairs: int
    served: ServedSummary
    snapshot: SnapshotHead | None
    excluded: ExcludedCounts | None
    sweep_crontab: str
    refresh_on_vote: bool
    refresh_debounce_seconds: int
    # None while the current pool's figures are computed (arena.transparency).
    recognisability: list[ModelRecognisability] | None = None
    bridging: Bridging | None = None
    position: PositionFigures | None = None
    fragility: FragilityView | None = None
    ledger: Ledger | None = None
    cohort_test: bool = False  # RATINGS_COHORT_TEST: bursts of new sources are held out


def crontab_text(schedule: Any) -> str:
    """A celery ``crontab`` as its five fields (``*/10 * * * *``); ``str()`` of anything else."""
    fields = (
        "_orig_minute",
        "_orig_hour",
        "_orig_day_of_month",
        "_orig_month_of_year",
        "_orig_day_of_week",
    )
    if all(hasattr(schedule, f) for f in fields):
        return " ".join(str(getattr(schedule, f)) for f in fields)
    return str(schedule)


def _draws() -> tuple[list[DrawShare], list[PairShare], int]:
    drawable = list(
        ArenaModel.objects.filter(
            is_active=True, sampling_weight__gt=0, env_run__isnull=True
        ).order_by("slug")
    )
    by_id = {m.pk: m for m in drawable}
    probabilities = pair_probabilities_now({m.pk: m.sampling_weight for m in drawable})
    share = dict.fromkeys(by_id, 0.0)
    for (a, b), p in probabilities.items():
        share[a] += p
        share[b] += p
    draws = [
        DrawShare(
            slug=m.slug,
            name=m.display_name,
            public=m.is_public,
            weight=m.sampling_weight,
            share=share[m.pk],
        )
        for m in drawable
    ]
    draws.sort(key=lambda d: (-d.share, d.slug))
    top = sorted(probabilities.items(), key=lambda item: -item[1])[:TOP_PAIRS]
    pairs = [PairShare(a=by_id[a].slug, b=by_id[b].slug, probability=p) for (a, b), p in top]
    return draws, pairs, len(probabilities)


@dataclass(frozen=True)
class _SnapshotFigures:
    """What the page reads of a snapshot, from one read of its payload, for the cache to keep."""

    served: dict[str, Any]  # the models served, as JSON
    ledger: dict[str, Any]  # the fairness ledger's counts, as JSON
    excluded: ExcludedCounts | None
    fragility: FragilityView | None
    position: PositionFigures | None


def _snapshot_figures(head: SnapshotHead) -> _SnapshotFigures:
    payload = snapshot_payload(snapshot_row(head))
    served = payload.get("served")
    ledger = payload.get("ledger")
    return _SnapshotFigures(
        served=served if served is not None else served_summary_json(models_served()),
        ledger=ledger if ledger is not None else ledger_counts_json(ledger_counts()),
        excluded=payload.get("excluded"),
        fragility=fragility_view(payload),
        position=position_figures(dict(payload)),
    )


def fragility_view(payload: SnapshotPayload) -> FragilityView | None:
    """The overall view's fragility audit (style control on, else off), with the models'
    names; None when the snapshot has none (written before the audit, or streamed)."""
    overall = next((c for c in payload.get("categories", []) if c.get("key") == "overall"), None)
    if overall is None:
        return None
    for style in ("on", "off"):
        result = overall.get("results", {}).get(style)
        audit: FragilityDict | None = result.get("fragility") if result else None
        if audit is not None:
            break
    else:
        return None
    models = payload.get("models", {})

    def name(slug: str) -> str:
        meta = models.get(slug)
        return meta["name"] if meta else slug

    ranks = [
        FragileRank(
            rank=p["rank"],
            upper=name(p["upper"]),
            lower=name(p["lower"]),
            gap=p["gap"] or 0.0,
            removal=p["removal"],
            flip=p["flip"],
        )
        for p in audit["pairs"]
    ]
    leader = None
    if audit["leader"] is not None:
        removal, flip = audit["leader_removal"], audit["leader_flip"]
        leader = LeaderFragility(
            model=name(audit["leader"]),
            removal=removal,
            flip=flip,
            removal_challenger=name(removal["challenger"]) if removal else "",
            flip_challenger=name(flip["challenger"]) if flip else "",
        )
    return FragilityView(
        style=style,
        ranks=ranks,
        leader=leader,
        n_battles=audit["n_battles"],
        refits=audit["refits"],
    )


def _figures(head: SnapshotHead) -> _SnapshotFigures:
    # The name changes with ``_SnapshotFigures``' fields: a kept copy of an older shape would
    # be read back without them.
    return snapshot_cached(head, "transparency-v2", (), lambda: _snapshot_figures(head))


def transparency_ledger() -> Ledger:
    """The fairness ledger alone (``/transparency/ledger.json``): the newest snapshot's counts
    (counted now before the first snapshot) with the changes of standing recorded up to now."""
    head = snapshot_head()
    if head is None:
        return ledger_view(ledger_counts())
    return ledger_view(ledger_counts_from_json(_figures(head).ledger, counted_at=head.created_at))


def transparency() -> Transparency:
    snapshot = snapshot_head()
    excluded = None
    position = None
    fragility = None
    if snapshot is None:
        served = models_served()
        counts = ledger_counts()
    else:
        head = snapshot
        figures = _figures(head)
        excluded, fragility, position = figures.excluded, figures.fragility, figures.position
        # Decoded on each visit (a few dozen rows): the labels follow the visitor's language.
        served = served_summary_from_json(figures.served)
        counts = ledger_counts_from_json(figures.ledger, counted_at=head.created_at)
    draws, pairs, n_pairs = _draws()
    sweep = settings.CELERY_BEAT_SCHEDULE.get(SNAPSHOT_SWEEP, {})
    return Transparency(
        policy=sampling_policy(),
        draws=draws,
        top_pairs=pairs,
        n_pairs=n_pairs,
        served=served,
        snapshot=snapshot,
        excluded=excluded,
        sweep_crontab=crontab_text(sweep.get("schedule")) if sweep else "",
        refresh_on_vote=bool(settings.RATINGS_REFRESH_ON_VOTE),
        refresh_debounce_seconds=int(settings.RATINGS_REFRESH_DEBOUNCE_SECONDS),
        recognisability=pool_recognisability(),
        bridging=bridging_now(),
        position=position,
        fragility=fragility,
        ledger=ledger_view(counts),
        cohort_test=bool(settings.RATINGS_COHORT_TEST),
    )


# --- The ledger as JSON (``/transparency/ledger.json``) ---------------------------------------


class LedgerModelJson(TypedDict):
    slug: str
    name: str
    active: bool
    public: bool
    ever_public: bool
    retired_unrecorded: bool
    release_date: str | None
    first_public: str | None
    battles: int
    battles_recent: int
    share: float | None
    share_recent: float | None
    votes: int
    exported: int
    prerelease_battles: int
    prerelease_votes: int
    equal_counted: bool
    equal_counted_recent: bool


class LedgerEventJson(TypedDict):
    slug: str
    name: str
    change: str
    reason: str
    at: str


class LedgerProviderJson(TypedDict):
    name: str
    battles: int
    votes: int
    exported: int
    share: float | None
    share_recent: float | None
    equal_share: float | None
    equal_share_recent: float | None
    models: list[LedgerModelJson]
    events: list[LedgerEventJson]


class LedgerJson(TypedDict):
    counted_at: str
    window_days: int
    battles: int
    battles_recent: int
    exported: int
    equal_share: float | None
    equal_models: int
    equal_share_recent: float | None
    equal_models_recent: int
    providers: list[LedgerProviderJson]


def _iso(value: date | datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def ledger_json(ledger: Ledger) -> LedgerJson:
    """``ledger`` as the JSON download gives it (dates in ISO 8601, shares as fractions)."""
    return {
        "counted_at": ledger.counted_at.isoformat(),
        "window_days": ledger.window_days,
        "battles": ledger.battles,
        "battles_recent": ledger.battles_recent,
        "exported": ledger.exported,
        "equal_share": ledger.equal_share,
        "equal_models": ledger.equal_models,
        "equal_share_recent": ledger.equal_share_recent,
        "equal_models_recent": ledger.equal_models_recent,
        "providers": [
            {
                "name": p.name,
                "battles": p.battles,
                "votes": p.votes,
                "exported": p.exported,
                "share": p.share,
                "share_recent": p.share_recent,
                "equal_share": p.equal_share,
                "equal_share_recent": p.equal_share_recent,
                "models": [
                    {
                        "slug": m.counts.slug,
                        "name": m.counts.name,
                        "active": m.active,
                        "public": m.public,
                        "ever_public": m.ever_public,
                        "retired_unrecorded": m.retired_unrecorded,
                        "release_date": _iso(m.counts.release_date),
                        "first_public": _iso(m.counts.first_public),
                        "battles": m.counts.battles,
                        "battles_recent": m.counts.battles_recent,
                        "share": m.share,
                        "share_recent": m.share_recent,
                        "votes": m.counts.votes,
                        "exported": m.counts.exported,
                        "prerelease_battles": m.counts.prerelease_battles,
                        "prerelease_votes": m.counts.prerelease_votes,
                        "equal_counted": m.equal_counted,
                        "equal_counted_recent": m.equal_counted_recent,
                    }
                    for m in p.models
                ],
                "events": [
                    {
                        "slug": e.slug,
                        "name": e.name,
                        "change": e.change,
                        "reason": e.reason,
                        "at": e.at.isoformat(),
                    }
                    for e in p.events
                ],
            }
            for p in ledger.providers
        ],
    }
