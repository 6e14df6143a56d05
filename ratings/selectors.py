"""Reads for the ratings side: the models to describe, the latest snapshot, the leaderboard view.

The votes a fit rates are defined here (``rated_votes``: the arena's vote selector with the
caps the settings name), so that a page counting them (a model's win rates) and the fit agree;
``ratings.vote_sources`` reads them for the fit. This module loads neither numpy, pandas nor
pyarrow, so the web worker that shows the leaderboard does not either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings
from django.db.models import QuerySet
from django.utils.translation import gettext_noop

from arena.models import ArenaModel
from arena.sampling.stats import pair_probabilities_now
from arena.selectors import SourceCap, votes_for_rating
from ratings.category_text import view_reason, view_reason_text
from ratings.engine import ModelRatingDict, RatingResultDict
from ratings.models import LeaderboardSnapshot
from ratings.page_cache import snapshot_cached, snapshot_head, snapshot_row
from ratings.payload import (
    CategoryEntry,
    ModelMeta,
    ProvisionalEntry,
    SnapshotPayload,
    ViewReason,
)

STYLE_OPTIONS = ("on", "off")
DEFAULT_CATEGORY = "overall"

#: A provisional model's reason, in words (``ratings.payload.SnapshotReason``).
# English here (the downloads are never localised); the page translates each one when it shows
# it (``{% translate row.reason_text %}``).
PROVISIONAL_REASON_TEXT = {
    "no_losses": gettext_noop(
        "No rated model has beaten or tied it yet, directly or through others, so its "
        "rating has no upper bound."
    ),
    "no_wins": gettext_noop(
        "It has not beaten or tied a rated model yet, directly or through others, so its "
        "rating has no lower bound."
    ),
    "not_connected": gettext_noop(
        "It has not met the rated models, directly or through others, so its rating "
        "cannot be put on their scale. Mixed battles fix that: while a live model is not "
        "established, part of the pool battles (ARENA_BRIDGE_SHARE) set its live answer to a pool "
        "prompt against a rated model's stored answer, and a win and a loss (or a tie) there "
        "connect it."
    ),
    "few_votes": gettext_noop("This view has too few votes to rate any model yet."),
}


def source_cap() -> SourceCap:
    """Each source's bound on a model's rated votes, from the settings."""
    return SourceCap(
        min_votes=settings.RATINGS_SOURCE_MIN_VOTES, share=settings.RATINGS_SOURCE_MAX_SHARE
    )


def rated_votes() -> QuerySet[Any, Any]:
    """The votes a refit rates: ``votes_for_rating`` with repeated visitors' prompts capped at
    ``RATINGS_DUPLICATE_PROMPT_CAP`` votes each and each source's votes on a model bounded
    (``source_cap``), the same for both refit paths (the caps are windows in the query, so the
    in-memory read and the Parquet path's COPY leave out the same votes)."""
    return votes_for_rating(
        duplicate_cap=settings.RATINGS_DUPLICATE_PROMPT_CAP,
        source_cap=source_cap(),
        reactions_decide_ties=settings.RATINGS_COUNT_REACTIONS,
    )


def models_metadata() -> dict[str, dict[str, Any]]:
    """What the leaderboard shows about every model, keyed by slug (inactive ones included)."""
    return {
        m.slug: {
            "name": m.display_name,
            "organization": m.organization,
            "license": m.license,
            "active": m.is_active,
            "public": m.is_public,
        }
        for m in ArenaModel.objects.all()
    }


def snapshot_latest() -> LeaderboardSnapshot | None:
    return LeaderboardSnapshot.objects.order_by("-created_at", "-id").first()


class RatedRow(ModelRatingDict):
    """A rated model as the page shows it: the payload's row, what the model is, its error bars."""

    name: str
    organization: str
    license: str
    active: bool
    minus: float  # rating - rating_lower
    plus: float  # rating_upper - rating


class ProvisionalRow(ProvisionalEntry):
    """A provisional model as the page shows it: the payload's row, what the model is, why."""

    name: str
    organization: str
    license: str
    active: bool
    reason_text: str


def _meta(models: dict[str, ModelMeta], slug: str) -> ModelMeta:
    """What the page shows about ``slug``; fields an older payload lacks take their defaults."""
    info = models.get(slug)
    if info is None:
        return {"name": slug, "organization": "", "license": "", "active": True}
    return {
        "name": info.get("name", slug),
        "organization": info.get("organization", ""),
        "license": info.get("license", ""),
        "active": info.get("active", True),
    }


@dataclass(frozen=True)
class LeaderboardView:
    """One category and style setting of a snapshot, shaped for the page and the downloads."""

    snapshot: LeaderboardSnapshot
    category: CategoryEntry
    style: str
    result: RatingResultDict | None  # the engine's result, or None for "not enough votes"
    rows: list[RatedRow]
    provisional: list[ProvisionalRow]  # models not rated in this view, with record and reason

    @property
    def stored_reason(self) -> ViewReason | str:
        """Why this view has no result (a category or one style setting short of votes), as
        the snapshot stores it: a code and its figures, or an older snapshot's sentence."""
        reasons = self.category.get("reasons") or {}
        return reasons.get(self.style) or self.category.get("reason") or ""

    @property
    def reason_code(self) -> ViewReason | None:
        """``stored_reason`` as a code (an older snapshot's known sentences read back)."""
        return view_reason(self.stored_reason)

    @property
    def reason(self) -> str:
        """Why this view has no result, in the active language ("" when the snapshot stores
        none, or an older sentence this code does not know: the page then says it generally)."""
        code = self.reason_code
        return view_reason_text(code) if code is not None else ""

    @property
    def warnings(self) -> list[str]:
        """What the fit had to fall back on (an anchor that could not serve)."""
        method = self.result.get("method") if self.result else None
        return list(method.get("warnings") or []) if method else []

    @property
    def has_not_connected(self) -> bool:
        return any(row["reason"] == "not_connected" for row in self.provisional)

    @property
    def has_preliminary(self) -> bool:
        return any(row["preliminary"] for row in self.rows)

    @property
    def has_rank_spread(self) -> bool:
        """Whether the rows carry rank spreads and tiers (a snapshot before schema 7 has none:
        the page then shows neither column)."""
        return bool(self.rows) and all("rank_worst" in row for row in self.rows)

    @property
    def categories(self) -> list[CategoryEntry]:
        return list(snapshot_payload(self.snapshot).get("categories", []))


def snapshot_payload(snapshot: LeaderboardSnapshot) -> SnapshotPayload:
    """The snapshot's payload, typed (written by ``ratings.services.snapshot_build``)."""
    return cast(SnapshotPayload, snapshot.payload)


def leaderboard_view(
    snapshot: LeaderboardSnapshot, *, category: str | None, style: str | None
) -> LeaderboardView:
    """Pick a category (unknown keys fall back to overall) and a style setting (default on)."""
    payload = snapshot_payload(snapshot)
    categories = payload.get("categories", [])
    by_key = {c["key"]: c for c in categories}
    chosen = by_key.get(category or "") or by_key.get(DEFAULT_CATEGORY) or categories[0]
    style = style if style in STYLE_OPTIONS else "on"
    result = (chosen.get("results") or {}).get(style)
    meta = payload.get("models", {})
    provisional: list[ProvisionalEntry]
    if result:
        # The engine's reasons are a subset of the snapshot's.
        provisional = cast(list[ProvisionalEntry], result.get("provisional") or [])
    else:
        provisional = (chosen.get("provisional") or {}).get(style) or []
    rows: list[RatedRow] = []
    for entry in result["models"] if result else []:
        rows.append(
            {
                **entry,
                "preliminary": bool(entry.get("preliminary", False)),  # before schema 4
                **_meta(meta, entry["model"]),
                "minus": entry["rating"] - entry["rating_lower"],
                "plus": entry["rating_upper"] - entry["rating"],
            }
        )
    unrated: list[ProvisionalRow] = []
    for row in provisional:
        unrated.append(
            {
                **row,
                **_meta(meta, row["model"]),
                "reason_text": PROVISIONAL_REASON_TEXT.get(row["reason"], row["reason"]),
            }
        )
    return LeaderboardView(
        snapshot=snapshot,
        category=chosen,
        style=style,
        result=result,
        rows=rows,
        provisional=unrated,
    )


def models_leaderboard_status(snapshot: LeaderboardSnapshot | None) -> dict[str, str]:
    """Each model's place on the default view (overall, style control on) of ``snapshot``:
    ``ranked`` (``ranked, preliminary`` while its interval rests on few votes) or
    ``provisional``, by slug; a model not listed is not yet rated."""
    if snapshot is None or not snapshot_payload(snapshot).get("categories"):
        return {}
    view = leaderboard_view(snapshot, category=None, style=None)
    status = {row["model"]: "provisional" for row in view.provisional}
    for row in view.rows:
        status[row["model"]] = "ranked, preliminary" if row["preliminary"] else "ranked"
    return status


@dataclass(frozen=True)
class PublicRank:
    """A model's place on the public leaderboard's default view (overall, style control on)."""

    rank: int
    rating: float
    preliminary: bool


def public_ranks() -> dict[str, PublicRank]:
    """Each rated model's ``PublicRank`` in the newest snapshot, by slug ({} before the first
    snapshot, or when it rates none): its head read in one query, the ranks from the cache
    after the first call per snapshot (``ratings.page_cache``), as the leaderboard page reads
    them."""
    head = snapshot_head()
    if head is None:
        return {}
    return snapshot_cached(head, "public_ranks", (), lambda: _public_ranks(snapshot_row(head)))


def _public_ranks(snapshot: LeaderboardSnapshot) -> dict[str, PublicRank]:
    if not snapshot_payload(snapshot).get("categories"):
        return {}
    view = leaderboard_view(snapshot, category=None, style=None)
    return {
        row["model"]: PublicRank(
            rank=row["rank"], rating=row["rating"], preliminary=row["preliminary"]
        )
        for row in view.rows
    }


def draw_propensity(min_share: float) -> dict[tuple[str, str], float]:
    """The probability that the sampler draws each pair of models (by slug), for the fit's
    inverse-propensity weights (``RATINGS_INVERSE_PROPENSITY``).

    The draw probability is not stored with a battle, so it is computed here from the policy
    in force (``arena.sampling.stats.pair_probabilities_now``: the active rule with the latest
    snapshot's statistics and the floor, or the weighted draw when it is off) over every model,
    and applies to every vote of a pair whenever it was cast. That is an approximation: exact
    while the sampling weights and the snapshot statistics have not changed since the votes.
    A model whose weight is 0 now (retired) takes the smallest positive weight, as it was
    drawn when it had one. Each probability is floored at ``min_share / pairs``, so no pair
    weighs more than ``1 / min_share`` times what a uniform draw would give it.
    """
    models = list(ArenaModel.objects.only("pk", "slug", "sampling_weight"))
    positive = [float(m.sampling_weight) for m in models if m.sampling_weight > 0]
    stand_in = min(positive, default=1.0)
    weights = {
        m.pk: float(m.sampling_weight) if m.sampling_weight > 0 else stand_in for m in models
    }
    probabilities = pair_probabilities_now(weights)
    floor = min_share / max(len(probabilities), 1)
    slug = {m.pk: m.slug for m in models}
    return {(slug[a], slug[b]): max(p, floor) for (a, b), p in probabilities.items()}
