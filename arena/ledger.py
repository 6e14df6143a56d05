"""The fairness ledger: per provider, what the arena gave each one's models, and when.

Why one module: the counts a snapshot keeps and the view a visit builds from them are one
contract (the counts' fields, their JSON, the equal share's rule); apart, each half would import
the other's dataclasses and the rule would be read in two places.

*The Leaderboard Illusion* (Singh et al. 2025) found four ways an arena favours some providers
over others: private variants tested before release (and only the best one published), unequal
sampling, models deprecated silently, and unequal access to the arena's data. The ledger answers
each from the arena's own rows, per provider as a reader names it (the model's organisation,
else its endpoint's name):

- testing before release: each model's battles and votes while it was private (``is_public``
  off, by its recorded history, ``ModelStatusChange``; a model without history as it is now) or
  before its ``release_date``, and whether it was ever made public, so that a variant tested
  privately and then withdrawn still shows;
- sampling: each model's share of the battle appearances (a battle shows two models, so the
  shares add to 100%), over all time and the last ``WINDOW_DAYS`` days, against an equal share:
  one over the models that were in a battle of the period or can be drawn now;
- votes, and the rows of the default vote export (what the leaderboard counts: anonymous
  battles, unflagged votes) that hold its models: the same export for every provider;
- retirements and reactivations with their dates and reasons, and changes of visibility.

``ledger_counts`` counts in three queries (the models, their history, the battles grouped by
pair of models) at one moment; the rating task keeps the result in each snapshot
(``payload["ledger"]``) as it keeps the models served, so a visit does not count battles.
``ledger_view`` adds on each visit the changes of standing recorded up to now (a retirement
shows at once, never at the next snapshot), read once per pool generation into the shared
cache: each change saves its model, which starts a new generation (``arena.pool_cache``). Environment battles and runs' hidden
models are left out, as everywhere on /transparency.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Q
from django.utils import timezone

from arena.models import ArenaModel, Battle, ModelStatusChange
from arena.pool_cache import pool_cache

#: The recent window of the sampling shares, in days before the count.
WINDOW_DAYS = 30
#: How long the changes of standing are kept for one pool generation (any saved model starts
#: another, whose read comes next).
EVENTS_CACHE_SECONDS = 24 * 3600
_EVENTS_KEY = "arena:ledger:events:v1:{generation}"
_VISIBILITY = (ModelStatusChange.Change.PUBLISHED, ModelStatusChange.Change.UNPUBLISHED)
_STANDING = (ModelStatusChange.Change.RETIRED, ModelStatusChange.Change.REACTIVATED)


@dataclass(frozen=True)
class ModelCounts:
    """One model as counted: its standing then, and its battles, votes and exported rows."""

    id: int
    slug: str
    name: str
    provider: str  # the organisation, else the endpoint's name; "" when neither
    public: bool
    active: bool
    drawable: bool  # active with a positive weight: in the equal share's count
    ever_public: bool
    release_date: date | None
    first_public: datetime | None  # when it was first made public after being private
    battles: int
    battles_recent: int
    votes: int
    exported: int  # rows of the default export with this model
    prerelease_battles: int  # while private, or before its release date
    prerelease_votes: int


@dataclass(frozen=True)
class ProviderCounts:
    """A provider's battles (each counted once, whichever side), votes and exported rows."""

    name: str
    battles: int
    votes: int
    exported: int


@dataclass(frozen=True)
class LedgerCounts:
    counted_at: datetime
    window_days: int
    battles: int
    battles_recent: int
    exported: int  # rows of the default export
    models: list[ModelCounts]
    providers: list[ProviderCounts]


def provider_name(model: ArenaModel) -> str:
    """The provider a reader names a model by: its organisation, else its endpoint's name."""
    if model.organization.strip():
        return model.organization.strip()
    return model.provider.name if model.provider is not None else ""


def private_spans(
    changes: list[tuple[str, datetime]], public_now: bool
) -> list[tuple[datetime | None, datetime | None]]:
    """The spans of time (start, end; None for unbounded) a model was private, from its
    visibility changes in order. Before its first change it was the opposite of what that
    change made it; a model without any was always as it is now."""
    seen = [(change, at) for change, at in changes if change in _VISIBILITY]
    public = seen[0][0] == ModelStatusChange.Change.UNPUBLISHED if seen else public_now
    spans: list[tuple[datetime | None, datetime | None]] = []
    start: datetime | None = None
    for change, at in seen:
        if change == ModelStatusChange.Change.PUBLISHED and not public:
            spans.append((start, at))
            public = True
        elif change == ModelStatusChange.Change.UNPUBLISHED and public:
            start, public = at, False
    if not public:
        spans.append((start, None))
    return spans


def _prerelease(
    side: str, spans: dict[int, list[tuple[datetime | None, datetime | None]]]
) -> Q | None:
    """Battles where ``side``'s model was private or before its release, as one condition."""
    condition: Q | None = None
    for model_id, model_spans in spans.items():
        term = Q(**{side: model_id})
        if all(start is not None or end is not None for start, end in model_spans):
            when = Q()
            for start, end in model_spans:
                span = Q()
                if start is not None:
                    span &= Q(created_at__gte=start)
                if end is not None:
                    span &= Q(created_at__lt=end)
                when |= span
            term &= when
        # else private all along: every battle of the model counts
        condition = term if condition is None else condition | term
    return condition


def ledger_counts(*, now: datetime | None = None) -> LedgerCounts:
    """Count the ledger at ``now`` (the current time by default): three queries, whatever the
    number of battles (the battles' one is grouped by pair of models)."""
    now = now or timezone.now()
    since = now - timedelta(days=WINDOW_DAYS)
    models = {
        m.pk: m for m in ArenaModel.objects.filter(env_run__isnull=True).select_related("provider")
    }
    history: dict[int, list[tuple[str, datetime]]] = defaultdict(list)
    for model_id, change, at in ModelStatusChange.objects.filter(
        model__env_run__isnull=True, at__lte=now
    ).values_list("model_id", "change", "at"):
        history[model_id].append((change, at))
    spans: dict[int, list[tuple[datetime | None, datetime | None]]] = {}
    for pk, m in models.items():
        found = private_spans(history.get(pk, []), m.is_public)
        if m.release_date is not None:
            found.append((None, datetime.combine(m.release_date, time.min, tzinfo=UTC)))
        if found:
            spans[pk] = found
    anonymous_unflagged = Q(mode=Battle.Mode.ANONYMOUS, vote__flagged=False)
    aggregates: dict[str, Any] = {
        "n": Count("id"),
        "recent": Count("id", filter=Q(created_at__gte=since)),
        "votes": Count("vote"),
        "exported": Count("vote", filter=anonymous_unflagged),
    }
    for side in ("a", "b"):
        condition = _prerelease(f"model_{side}", spans)
        if condition is not None:
            aggregates[f"pre_{side}"] = Count("id", filter=condition)
            aggregates[f"pre_votes_{side}"] = Count("vote", filter=condition)
    rows = (
        Battle.objects.exclude(source=Battle.Source.ENV)
        .filter(created_at__lte=now)
        .order_by()
        .values("model_a", "model_b")
        .annotate(**aggregates)
    )
    per_model: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    per_provider: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, int] = defaultdict(int)
    for grouped in rows:
        row: dict[str, Any] = dict(grouped)  # keys built from the aggregates above
        for key in ("n", "recent", "exported"):
            totals[key] += row[key]
        sides = [(row[f"model_{s}"], s) for s in ("a", "b") if row[f"model_{s}"] in models]
        for model_id, s in sides:
            tally = per_model[model_id]
            for key in ("n", "recent", "votes", "exported"):
                tally[key] += row[key]
            tally["pre"] += row.get(f"pre_{s}", 0)
            tally["pre_votes"] += row.get(f"pre_votes_{s}", 0)
        for name in {provider_name(models[model_id]) for model_id, _ in sides}:
            for key in ("n", "votes", "exported"):
                per_provider[name][key] += row[key]
    counted = []
    for pk, m in models.items():
        drawable = m.is_active and m.sampling_weight > 0
        if pk not in per_model and not drawable and pk not in history:
            continue  # never in a battle, not drawable, nothing recorded: nothing to account
        tally = per_model[pk]
        changes = history.get(pk, [])
        published = [at for c, at in changes if c == ModelStatusChange.Change.PUBLISHED]
        visibility = [c for c, _ in changes if c in _VISIBILITY]
        was_private = bool(visibility) and visibility[0] == ModelStatusChange.Change.PUBLISHED
        counted.append(
            ModelCounts(
                id=pk,
                slug=m.slug,
                name=m.display_name,
                provider=provider_name(m),
                public=m.is_public,
                active=m.is_active,
                drawable=drawable,
                ever_public=m.is_public or bool(published),
                release_date=m.release_date,
                first_public=published[0] if was_private else None,
                battles=tally["n"],
                battles_recent=tally["recent"],
                votes=tally["votes"],
                exported=tally["exported"],
                prerelease_battles=tally["pre"],
                prerelease_votes=tally["pre_votes"],
            )
        )
    counted.sort(key=lambda c: (-c.battles, c.slug))
    providers = [
        ProviderCounts(name=name, battles=t["n"], votes=t["votes"], exported=t["exported"])
        for name, t in per_provider.items()
    ]
    providers.sort(key=lambda p: p.name)
    return LedgerCounts(
        counted_at=now,
        window_days=WINDOW_DAYS,
        battles=totals["n"],
        battles_recent=totals["recent"],
        exported=totals["exported"],
        models=counted,
        providers=providers,
    )


def ledger_counts_json(counts: LedgerCounts) -> dict[str, Any]:
    """``counts`` as JSON (dates in ISO 8601), for a snapshot to keep (``ledger_counts_from_json``
    reads it back). The moment of the count is left out: it is the snapshot's own, and two
    snapshots of the same battles keep the same counts."""
    data = asdict(counts)
    del data["counted_at"]
    for model in data["models"]:
        for key in ("release_date", "first_public"):
            if model[key] is not None:
                model[key] = model[key].isoformat()
    return data


def ledger_counts_from_json(data: dict[str, Any], *, counted_at: datetime) -> LedgerCounts:
    """The ``LedgerCounts`` that ``ledger_counts_json`` wrote, counted at ``counted_at`` (the
    snapshot's time)."""
    models = []
    for m in data["models"]:
        release, first = m["release_date"], m["first_public"]
        models.append(
            ModelCounts(
                **{
                    **m,
                    "release_date": date.fromisoformat(release) if release else None,
                    "first_public": datetime.fromisoformat(first) if first else None,
                }
            )
        )
    return LedgerCounts(
        counted_at=counted_at,
        window_days=int(data["window_days"]),
        battles=int(data["battles"]),
        battles_recent=int(data["battles_recent"]),
        exported=int(data["exported"]),
        models=models,
        providers=[ProviderCounts(**p) for p in data["providers"]],
    )


# --- What a visit shows: the counts, with the changes of standing recorded up to now ---------


@dataclass(frozen=True)
class LedgerEvent:
    """A recorded change of a model's standing."""

    slug: str
    name: str
    change: str  # a ``ModelStatusChange.Change`` value
    reason: str
    at: datetime


@dataclass(frozen=True)
class LedgerModel:
    """A model's line: its counts, its standing now and its shares of the appearances."""

    counts: ModelCounts
    active: bool
    public: bool
    ever_public: bool
    share: float | None  # of the battle appearances; None without battles
    share_recent: float | None
    # Retired before retirements were recorded: no date or reason to show.
    retired_unrecorded: bool = False
    # Counted in the equal share of all time, of the recent window (in a battle of it, or
    # drawable when counted); a share of a model that is not has no equal to stand against.
    equal_counted: bool = True
    equal_counted_recent: bool = True


@dataclass(frozen=True)
class LedgerProvider:
    name: str  # "" for models with neither organisation nor endpoint
    models: list[LedgerModel]
    battles: int
    votes: int
    exported: int
    share: float | None
    share_recent: float | None
    equal_share: float | None  # its models in the equal share's count, over that count
    equal_share_recent: float | None
    prerelease: list[LedgerModel]  # models with battles while private or before release
    events: list[LedgerEvent]  # every recorded change of standing, oldest first
    retired: list[LedgerModel]  # models retired now

    @property
    def retirements(self) -> list[LedgerEvent]:
        return [e for e in self.events if e.change == ModelStatusChange.Change.RETIRED]


@dataclass(frozen=True)
class Ledger:
    counted_at: datetime
    window_days: int
    battles: int
    battles_recent: int
    exported: int
    equal_share: float | None  # one over ``equal_models``
    equal_models: int
    equal_share_recent: float | None
    equal_models_recent: int
    providers: list[LedgerProvider] = field(default_factory=list)

    @property
    def prerelease_models(self) -> int:
        return sum(len(p.prerelease) for p in self.providers)


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


@dataclass(frozen=True)
class _Recorded:
    """Every change of standing recorded, by model, and each such model's provider and
    standing now (for those a count has not seen)."""

    events: dict[int, list[LedgerEvent]]
    known: dict[int, tuple[str, bool, bool]]


def _recorded_key() -> str:
    return _EVENTS_KEY.format(generation=pool_cache().tokens["pool"])


def _recorded() -> _Recorded:
    """The changes of standing, read once per pool generation: every change saves its model,
    which starts a new one (``arena.pool_cache``), so the next read sees it."""
    key = _recorded_key()
    kept = cache.get(key)
    if isinstance(kept, _Recorded):
        return kept
    events: dict[int, list[LedgerEvent]] = defaultdict(list)
    known: dict[int, tuple[str, bool, bool]] = {}
    for row in (
        ModelStatusChange.objects.filter(model__env_run__isnull=True)
        .order_by("at", "id")
        .values(
            "model_id",
            "model__slug",
            "model__display_name",
            "model__organization",
            "model__provider__name",
            "model__is_active",
            "model__is_public",
            "change",
            "reason",
            "at",
        )
    ):
        events[row["model_id"]].append(
            LedgerEvent(
                slug=row["model__slug"],
                name=row["model__display_name"],
                change=row["change"],
                reason=row["reason"],
                at=row["at"],
            )
        )
        provider = row["model__organization"].strip() or row["model__provider__name"] or ""
        known[row["model_id"]] = (provider, row["model__is_active"], row["model__is_public"])
    recorded = _Recorded(events=dict(events), known=known)
    cache.set(key, recorded, timeout=EVENTS_CACHE_SECONDS)
    return recorded


def ledger_view(counts: LedgerCounts) -> Ledger:
    """``counts`` as the page shows them, with every change of standing recorded up to now
    (one query per change of the models, else none): a model retired or reactivated since the
    count shows as it is now."""
    recorded = _recorded()
    events, known = recorded.events, recorded.known
    models = list(counts.models)
    counted = {m.id for m in models}
    for pk, (provider, active, public) in known.items():
        if pk in counted:
            continue
        first = events[pk][0]
        # Recorded since the count (or a model with no battle): shown with no battles.
        models.append(
            ModelCounts(
                id=pk,
                slug=first.slug,
                name=first.name,
                provider=provider,
                public=public,
                active=active,
                drawable=False,
                ever_public=public,
                release_date=None,
                first_public=None,
                **dict.fromkeys(
                    (
                        "battles",
                        "battles_recent",
                        "votes",
                        "exported",
                        "prerelease_battles",
                        "prerelease_votes",
                    ),
                    0,
                ),
            )
        )
    appearances, appearances_recent = 2 * counts.battles, 2 * counts.battles_recent
    in_equal = {m.id for m in models if m.battles or m.drawable}
    in_equal_recent = {m.id for m in models if m.battles_recent or m.drawable}
    by_provider: dict[str, list[LedgerModel]] = defaultdict(list)
    for m in models:
        mine = events.get(m.id, [])
        standing = [e.change for e in mine if e.change in _STANDING]
        visibility = [e.change for e in mine if e.change in _VISIBILITY]
        active = standing[-1] == ModelStatusChange.Change.REACTIVATED if standing else m.active
        public = visibility[-1] == ModelStatusChange.Change.PUBLISHED if visibility else m.public
        by_provider[m.provider].append(
            LedgerModel(
                counts=m,
                active=active,
                public=public,
                ever_public=m.ever_public
                or public
                or ModelStatusChange.Change.PUBLISHED in visibility,
                share=_share(m.battles, appearances),
                share_recent=_share(m.battles_recent, appearances_recent),
                retired_unrecorded=not active and not standing,
                equal_counted=m.id in in_equal,
                equal_counted_recent=m.id in in_equal_recent,
            )
        )
    totals = {p.name: p for p in counts.providers}
    providers = []
    for name, lines in by_provider.items():
        total = totals.get(name, ProviderCounts(name=name, battles=0, votes=0, exported=0))
        ids = {line.counts.id for line in lines}
        provider_events = sorted((e for pk in ids for e in events.get(pk, [])), key=lambda e: e.at)
        providers.append(
            LedgerProvider(
                name=name,
                models=lines,
                battles=total.battles,
                votes=total.votes,
                exported=total.exported,
                share=_share(sum(m.counts.battles for m in lines), appearances),
                share_recent=_share(
                    sum(m.counts.battles_recent for m in lines), appearances_recent
                ),
                equal_share=_share(len(ids & in_equal), len(in_equal)),
                equal_share_recent=_share(len(ids & in_equal_recent), len(in_equal_recent)),
                prerelease=[m for m in lines if m.counts.prerelease_battles],
                events=provider_events,
                retired=[m for m in lines if not m.active],
            )
        )
    # The providers with the most battles first; the unattributed models last.
    providers.sort(key=lambda p: (not p.name, -p.battles, p.name))
    return Ledger(
        counted_at=counts.counted_at,
        window_days=counts.window_days,
        battles=counts.battles,
        battles_recent=counts.battles_recent,
        exported=counts.exported,
        equal_share=_share(1, len(in_equal)),
        equal_models=len(in_equal),
        equal_share_recent=_share(1, len(in_equal_recent)),
        equal_models_recent=len(in_equal_recent),
        providers=providers,
    )
