"""Reads for a model's page and the leaderboard's rating-over-time chart.

A model page shows what the registry says about a public model (its catalogue fields), its
rating in every category of the latest snapshot, its rating across snapshots and its record
against each opponent in the votes the leaderboard counts (``ratings.selectors.rated_votes``),
on the verdict the fit reads (``rated_winner``).

The record comes from the snapshot (``payload["records"]``, counted by the rating task from the
very votes it fitted), and everything the page derives from the snapshot is kept per snapshot
(``ratings.page_cache``), so a visit costs a few queries whatever the number of votes. A
snapshot written before the records were kept has its records counted from the votes once
(``model_opponents_counted``) and kept the same way; before the first snapshot they are counted
on each visit, when there are few votes to count.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Q

from arena.models import ArenaModel
from ratings.models import LeaderboardSnapshot
from ratings.page_cache import SnapshotHead, snapshot_cached, snapshot_head, snapshot_row
from ratings.selectors import DEFAULT_CATEGORY, rated_votes, snapshot_payload

#: How many snapshots, newest first, a rating-over-time series reads (each is a full payload).
SERIES_SNAPSHOTS = 60
#: How many of the leaderboard's top models its rating-over-time chart follows.
SERIES_TOP_MODELS = 5
#: Snapshots never change, so a series is cached under the newest one's id and time.
SERIES_CACHE_SECONDS = 24 * 3600


def model_public(*, name: str) -> ArenaModel | None:
    """The public model a page address names: its slug, or else its display name (any case)."""
    public = ArenaModel.objects.filter(is_public=True)
    return (
        public.filter(slug=name).first()
        or public.filter(display_name__iexact=name).order_by("id").first()
    )


@dataclass(frozen=True)
class CategoryRating:
    """The model's rating in one category of a snapshot (style control as the page defaults)."""

    key: str
    label: str
    rank: int
    rating: float
    rating_lower: float
    rating_upper: float
    votes: int
    preliminary: bool
    n_models: int


@dataclass(frozen=True)
class SeriesPoint:
    snapshot_id: int
    created_at: datetime
    rating: float
    rating_lower: float
    rating_upper: float


@dataclass(frozen=True)
class RatingSeries:
    """One model's rating across snapshots, oldest first."""

    model: str
    name: str
    points: list[SeriesPoint] = field(default_factory=list)


@dataclass(frozen=True)
class OpponentRecord:
    """The model's counted votes against one opponent; a tie (or both bad) counts half."""

    model: str
    name: str
    battles: int
    wins: int
    losses: int
    ties: int

    @property
    def win_rate(self) -> float:
        return (self.wins + 0.5 * self.ties) / self.battles if self.battles else 0.0


def _result(payload: Any, *, category: str, style: str) -> dict[str, Any] | None:
    for entry in payload.get("categories", []):
        if entry.get("key") == category:
            result: dict[str, Any] | None = (entry.get("results") or {}).get(style)
            return result
    return None


def model_category_ratings(
    *, slug: str, snapshot: LeaderboardSnapshot | None, style: str = "on"
) -> list[CategoryRating]:
    """The model's rating in each category of ``snapshot`` where it is rated, in payload order."""
    if snapshot is None:
        return []
    ratings = []
    for entry in snapshot_payload(snapshot).get("categories", []):
        result = (entry.get("results") or {}).get(style)
        if not result:
            continue
        for row in result["models"]:
            if row["model"] == slug:
                ratings.append(
                    CategoryRating(
                        key=entry["key"],
                        label=entry["label"],
                        rank=row["rank"],
                        rating=row["rating"],
                        rating_lower=row["rating_lower"],
                        rating_upper=row["rating_upper"],
                        votes=row["votes"],
                        preliminary=bool(row.get("preliminary", False)),
                        n_models=len(result["models"]),
                    )
                )
    return ratings


def rating_series(
    *,
    models: list[str],
    category: str = DEFAULT_CATEGORY,
    style: str = "on",
    limit: int = SERIES_SNAPSHOTS,
) -> list[RatingSeries]:
    """Each model's rating in ``category`` over the newest ``limit`` snapshots, oldest first;
    a snapshot where the model is not rated adds no point. Models keep the order given.

    The page asks on every visit and each snapshot is a whole payload, so the answer is cached
    until a newer snapshot exists (snapshots are immutable)."""
    newest = (
        LeaderboardSnapshot.objects.order_by("-created_at", "-id")
        .values_list("id", "created_at")
        .first()
    )
    if newest is None:
        return [RatingSeries(model=slug, name=slug) for slug in models]
    wanted = hashlib.sha256("\n".join([category, style, str(limit), *models]).encode()).hexdigest()
    key = f"ratings:series:{newest[0]}:{newest[1].timestamp()}:{wanted}"
    cached: list[RatingSeries] | None = cache.get(key)
    if cached is None:
        cached = _rating_series(models=models, category=category, style=style, limit=limit)
        cache.set(key, cached, SERIES_CACHE_SECONDS)
    return cached


def _rating_series(
    *, models: list[str], category: str, style: str, limit: int
) -> list[RatingSeries]:
    snapshots = list(LeaderboardSnapshot.objects.order_by("-created_at", "-id")[:limit])
    snapshots.reverse()
    points: dict[str, list[SeriesPoint]] = {slug: [] for slug in models}
    names: dict[str, str] = {}
    for snapshot in snapshots:
        payload = snapshot_payload(snapshot)
        for slug, meta in payload.get("models", {}).items():
            if slug in points:
                names[slug] = meta.get("name", slug)
        result = _result(payload, category=category, style=style)
        for row in result["models"] if result else []:
            if row["model"] in points:
                points[row["model"]].append(
                    SeriesPoint(
                        snapshot_id=snapshot.pk,
                        created_at=snapshot.created_at,
                        rating=row["rating"],
                        rating_lower=row["rating_lower"],
                        rating_upper=row["rating_upper"],
                    )
                )
    return [RatingSeries(model=s, name=names.get(s, s), points=points[s]) for s in models]


def model_opponents_counted(*, model: ArenaModel) -> list[OpponentRecord]:
    """The model's record against each public opponent counted from the votes, most battles
    first (the votes a refit rates: anonymous, unflagged, duplicate prompts and sources capped,
    each on its ``rated_winner``). One grouped query and one for the names; its time grows with
    the votes, so the page reads a snapshot's records instead (``model_opponents``)."""
    votes = rated_votes().filter(Q(battle__model_a=model) | Q(battle__model_b=model))
    grouped = (
        votes.order_by()
        .values_list("battle__model_a_id", "battle__model_b_id", "rated_winner")
        .annotate(n=Count("id"))
    )
    tally: dict[int, list[int]] = {}  # opponent id -> [wins, losses, ties]
    for a_id, b_id, winner, n in grouped:
        ours, theirs = ("model_a", "model_b") if a_id == model.pk else ("model_b", "model_a")
        opponent = b_id if a_id == model.pk else a_id
        counts = tally.setdefault(opponent, [0, 0, 0])
        if winner == ours:
            counts[0] += n
        elif winner == theirs:
            counts[1] += n
        else:
            counts[2] += n
    opponents = ArenaModel.objects.filter(pk__in=tally, is_public=True).only("slug", "display_name")
    records = [
        OpponentRecord(
            model=o.slug,
            name=o.display_name,
            battles=sum(tally[o.pk]),
            wins=tally[o.pk][0],
            losses=tally[o.pk][1],
            ties=tally[o.pk][2],
        )
        for o in opponents
    ]
    return sorted(records, key=lambda r: (-r.battles, r.name))


def model_opponents(*, slug: str, snapshot: LeaderboardSnapshot) -> list[OpponentRecord] | None:
    """The model's record against each public opponent in ``snapshot``'s rated votes, most
    battles first; None for a snapshot written before it kept the records (schema 5)."""
    payload = snapshot_payload(snapshot)
    kept = payload.get("records")
    if kept is None:
        return None
    meta = payload.get("models", {})
    records = []
    for first, second, first_wins, second_wins, ties in kept:
        if slug not in (first, second) or first == second:
            continue
        opponent = second if first == slug else first
        wins, losses = (first_wins, second_wins) if first == slug else (second_wins, first_wins)
        records.append(
            OpponentRecord(
                model=opponent,
                name=meta[opponent]["name"] if opponent in meta else opponent,
                battles=wins + losses + ties,
                wins=wins,
                losses=losses,
                ties=ties,
            )
        )
    return sorted(records, key=lambda r: (-r.battles, r.name))


@dataclass(frozen=True)
class ModelPage:
    model: ArenaModel
    snapshot: SnapshotHead | None
    ratings: list[CategoryRating]
    series: RatingSeries
    opponents: list[OpponentRecord]

    @property
    def overall(self) -> CategoryRating | None:
        return next((r for r in self.ratings if r.key == DEFAULT_CATEGORY), None)


@dataclass(frozen=True)
class _SnapshotPieces:
    ratings: list[CategoryRating]
    series: RatingSeries
    opponents: list[OpponentRecord]


def _pieces(head: SnapshotHead, model: ArenaModel) -> _SnapshotPieces:
    snapshot = snapshot_row(head)
    opponents = model_opponents(slug=model.slug, snapshot=snapshot)
    return _SnapshotPieces(
        ratings=model_category_ratings(slug=model.slug, snapshot=snapshot),
        series=rating_series(models=[model.slug])[0],
        opponents=model_opponents_counted(model=model) if opponents is None else opponents,
    )


def model_page(*, model: ArenaModel) -> ModelPage:
    """The page's figures: from the cache for the newest snapshot after its first visit."""
    head = snapshot_head()
    if head is None:
        return ModelPage(
            model=model,
            snapshot=None,
            ratings=[],
            series=RatingSeries(model=model.slug, name=model.slug),
            opponents=model_opponents_counted(model=model),
        )
    pieces = snapshot_cached(head, "model", (model.slug,), lambda: _pieces(head, model))
    return ModelPage(
        model=model,
        snapshot=head,
        ratings=pieces.ratings,
        series=pieces.series,
        opponents=pieces.opponents,
    )
