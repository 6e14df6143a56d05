"""Writing leaderboard snapshots: the payload over every view, the lock and the no-op rule.

Why one module: a snapshot's steps (the votes read, their bounds, every view's fit, the payload,
the lock and the no-op rule) are one run's parts, read top to bottom in the order they happen.

A snapshot is computed from the anonymous, unflagged votes (``ratings.vote_sources``) by the
Django-free engine (``ratings.engine``) for each category, with and without style control, and
stored as one immutable ``LeaderboardSnapshot`` row that the page and the downloads read.

The categories (``ratings.categories``): overall, coding, long prompts, multi-turn and one per
language present; a battle belongs to every one whose rule it meets.

Repeated visitors' prompts are down-sampled before any of this: of the votes whose live
prompt's first turn normalises to the same text (``arena.prompt_text``), only the first
``RATINGS_DUPLICATE_PROMPT_CAP`` by vote id are rated (``ratings.selectors.rated_votes``), as
LMArena caps its most repeated prompts. Every prompt past the cap is capped, not a top
percentile of them: with a cap, only prompts with more copies than it lose votes. Pool prompts
are curated and never capped. The snapshot's ``excluded.duplicate_prompts`` counts what was left
out.

Each source's influence is bounded next (``ratings.selectors.source_cap``): a source is a
vote's address hash, or its session where no address was kept, and its votes on a model count
at most ``max(RATINGS_SOURCE_MIN_VOTES, RATINGS_SOURCE_MAX_SHARE x the model's votes from the
other sources)``, the first by vote id. At the defaults (20, 0.15) one address holds at most 13%
of a model's rated evidence once the model has 133 votes from others, and the sessions of one
address are one source, so opening more sessions buys nothing. The snapshot's
``excluded.source_cap`` counts what was left out.

Within a view (a category with style control on or off; "on" uses the votes that carry style
counts) the engine rates the largest set of models where ratings exist and lists every other
model as provisional with its record and reason (``ratings.engine.identify``): a model that has
only won so far, one that has only lost, live models that never met the pool. A view is
``"insufficient"`` only when fewer than two models can be rated, when the category has fewer
than ``RATINGS_MIN_CATEGORY_VOTES`` votes, or when the style-controlled fit has no maximum on a
handful of votes (the engine's ``CannotRateError``); it then lists every model as provisional
(reason ``few_votes`` for models the engine would otherwise rate). Any other error is a bug:
it is logged and fails the run, and the previous snapshot stays on the page.

The scale is centred on the view's established models (``RATINGS_ESTABLISHED_MIN_VOTES`` rated
votes or more; their mean is 1000), or pinned on ``RATINGS_ANCHOR_MODEL``; a model with fewer
votes is rated but *preliminary*, never ranked above an established one, and its votes do not
move the scale. A view whose anchor is missing or preliminary is centred on the established
models instead, with the reason in its ``method.warnings``.

Past ``RATINGS_STREAM_THRESHOLD`` votes the same payload is built from a Parquet file of the
votes, a batch at a time (``snapshot_build_streamed``; the file is ``ratings.vote_sources``'), with sandwich intervals and without the
online Elo, which the streamed engine does not replay.

The overall view's results (both styles) also hold ``fragility`` (``ratings.engine.fragility``:
the fewest votes found to swap each adjacent rank of the top, verified by refitting). It costs
a few fits of its view, so other views go without; the streamed path does not compute it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import connection, transaction

from arena.ledger import ledger_counts, ledger_counts_json
from arena.sampling.stats import sampling_stats_snapshot_id
from arena.sampling.store import sampling_stats_store
from arena.signals import after_commit
from arena.transparency import models_served, served_summary_json, votes_excluded_counts
from ratings import engine
from ratings.cohorts import cohorts_quarantine_run
from ratings.models import LeaderboardSnapshot
from ratings.payload import (
    PAYLOAD_SCHEMA,
    CategoryEntry,
    ExcludedCounts,
    ModelMeta,
    ProvisionalEntry,
    SamplingInputs,
    SnapshotPayload,
    SnapshotReason,
    ViewReason,
)
from ratings.selectors import models_metadata, snapshot_latest, source_cap
from ratings.vote_sources import (
    BattlesParquet,
    FrameVotes,
    ParquetVotes,
    Votes,
    rated_votes_by_source,
    rating_battles,
    rating_battles_parquet,
    rating_votes_mark,
)

logger = logging.getLogger(__name__)

#: The ranks whose fragility the overall view's fits audit: the adjacent pairs among the
#: first this many established, shown models (``ratings.engine.fragility``).
FRAGILITY_TOP = 10
#: The views audited: the board's own (what /transparency shows), not every category's.
FRAGILITY_CATEGORIES = frozenset({"overall"})

# Key of the PostgreSQL advisory lock that serialises snapshot runs (any fixed 64-bit integer).
SNAPSHOT_LOCK_KEY = 0x5241_5449_4E47  # "RATING"


def snapshot_params(*, streamed: bool = False) -> dict[str, Any]:
    """Everything that shapes a snapshot besides the votes; part of the no-op rule.

    ``streamed``: the votes are past ``RATINGS_STREAM_THRESHOLD`` and are fitted from a Parquet
    file of the votes (``snapshot_refresh``), which computes sandwich intervals only: ``ci`` then says
    ``sandwich`` (what the page shows), ``ci_requested`` what ``RATINGS_CI`` asked when it
    differs, and ``streamed`` is true. Below the threshold the params are unchanged.
    """
    params: dict[str, Any] = {
        "ci": settings.RATINGS_CI,
        "rounds": settings.RATINGS_BOOTSTRAP_ROUNDS if settings.RATINGS_CI == "bootstrap" else None,
        "seed": settings.RATINGS_SEED,
        "min_category_votes": settings.RATINGS_MIN_CATEGORY_VOTES,
        "long_prompt_chars": settings.RATINGS_LONG_PROMPT_CHARS,
        "duplicate_prompt_cap": settings.RATINGS_DUPLICATE_PROMPT_CAP,
        "source_max_share": settings.RATINGS_SOURCE_MAX_SHARE,
        "source_min_votes": settings.RATINGS_SOURCE_MIN_VOTES,
        "established_min_votes": settings.RATINGS_ESTABLISHED_MIN_VOTES,
        "anchor": settings.RATINGS_ANCHOR_MODEL or None,
        "position": settings.RATINGS_POSITION,
        "inverse_propensity": settings.RATINGS_INVERSE_PROPENSITY,
        "propensity_min_share": (
            settings.RATINGS_PROPENSITY_MIN_SHARE if settings.RATINGS_INVERSE_PROPENSITY else None
        ),
        "votes": "anonymous, unflagged",
        "schema": PAYLOAD_SCHEMA,
        "fragility_top": FRAGILITY_TOP,
        "cohorts": _cohort_settings_digest() if settings.RATINGS_COHORT_TEST else None,
    }
    if streamed:
        if params["ci"] != "sandwich":
            params["ci_requested"] = params["ci"]
        params.update(ci="sandwich", rounds=None, streamed=True)
    return params


def _cohort_settings_digest() -> str:
    """The burst test's settings, keyed with SECRET_KEY: a change refits, but the published
    params do not give away thresholds an operator may keep to themself."""
    values = [
        settings.RATINGS_COHORT_WINDOWS_HOURS,
        settings.RATINGS_COHORT_Z_DETECT,
        settings.RATINGS_COHORT_Z_RELEASE,
        settings.RATINGS_COHORT_TRUSTED_DAYS,
        settings.RATINGS_COHORT_MIN_VOTES,
    ]
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, json.dumps(values).encode(), hashlib.sha256).hexdigest()[:16]


def params_digest(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


def _finite(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities (never valid JSON) become None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _public_only(result: engine.RatingResult, public: set[str]) -> engine.RatingResult:
    """The engine's result without the models that are not shown (``is_public`` off).

    Their votes still inform everyone else's rating; ranks, rank spreads and tiers are
    recomputed among those shown (a preliminary model still never above an established one).
    """
    shown = [m for m in result.models if m.model in public]
    at = engine.leaderboard_positions(
        np.array([m.rating for m in shown], dtype=float),
        np.array([m.rating_lower for m in shown], dtype=float),
        np.array([m.rating_upper for m in shown], dtype=float),
        np.array([m.preliminary for m in shown], dtype=bool),
    )
    elo = result.online_elo
    return replace(
        result,
        models=tuple(
            replace(
                m,
                rank=int(at.rank[k]),
                rank_worst=int(at.rank_worst[k]),
                tier=int(at.tier[k]) or None,
            )
            for k, m in enumerate(shown)
        ),
        matrices=result.matrices.only(public),
        online_elo=None if elo is None else {k: v for k, v in elo.items() if k in public},
        provisional=tuple(e for e in result.provisional if e.model in public),
    )


def _everyone_provisional(battles: pd.DataFrame, public: set[str]) -> list[ProvisionalEntry]:
    """Every public model of ``battles`` with its record, for a view that rates no one.

    The engine's reason where it has one; ``few_votes`` for the models it would rate.
    """
    if not len(battles):
        return []
    split = engine.identify_table(battles[["model_a", "model_b", "winner"]].reset_index(drop=True))
    reasons: dict[str, SnapshotReason] = {e.model: e.reason for e in split.provisional}
    entries = [
        _entry(r.model, r, reasons.get(r.model, "few_votes"))
        for r in split.records
        if r.model in public
    ]
    return sorted(entries, key=lambda e: (-e["battles"], e["model"]))


def _entry(
    model: str, record: engine.Record | engine.Provisional, reason: SnapshotReason
) -> ProvisionalEntry:
    return {
        "model": model,
        "battles": record.battles,
        "wins": record.wins,
        "losses": record.losses,
        "ties": record.ties,
        "reason": reason,
    }


STYLES = ("on", "off")  # style control on (the votes with style counts) and off (every vote)


def snapshot_build(
    battles: pd.DataFrame, *, models: dict[str, dict[str, Any]], params: dict[str, Any]
) -> SnapshotPayload:
    """The snapshot payload: each category fitted with and without style control."""
    return _payload(FrameVotes(battles), models=models, params=params)


def snapshot_build_streamed(
    *, models: dict[str, dict[str, Any]], params: dict[str, Any]
) -> tuple[SnapshotPayload, BattlesParquet]:
    """``snapshot_build`` over the rated votes without holding them in memory.

    The votes are written to a Parquet file in a temporary directory under
    ``RATINGS_SPILL_DIR`` (the system's default when unset), ``RATINGS_STREAM_BATCH_ROWS`` at
    a time from one ``COPY`` (``ratings.vote_sources.rating_battles_parquet``), and each
    view is fitted from it by ``engine.rate_parquet`` with sandwich intervals. The directory is
    removed when the build ends, whether it succeeds or fails.
    """
    batch_rows = settings.RATINGS_STREAM_BATCH_ROWS
    with tempfile.TemporaryDirectory(
        prefix="arena-ratings-", dir=settings.RATINGS_SPILL_DIR
    ) as tmp:
        votes = ParquetVotes(Path(tmp) / "votes.parquet")
        written = rating_battles_parquet(
            votes.path, batch_rows=batch_rows, observe=votes.observe, restart=votes.restart
        )
        logger.info(
            "ratings: %s votes written to Parquet in %s row groups of up to %s",
            written.rows,
            written.row_groups,
            batch_rows,
        )
        return _payload(votes, models=models, params=params), written


def _payload(
    votes: Votes, *, models: dict[str, dict[str, Any]], params: dict[str, Any]
) -> SnapshotPayload:
    public = {slug for slug, m in models.items() if m.get("public", True)}
    categories = []
    sampling_se: dict[str, float] = {}
    established: list[str] = []
    for category in votes.categories(long_prompt_chars=params["long_prompt_chars"]):
        n_votes, n_models = votes.census(category)
        entry: CategoryEntry = {
            "key": category.key,
            "label": category.label,
            "description": category.description,
            "n_votes": n_votes,
            "status": "ok",
            "reason": "",
            "results": {"on": None, "off": None},
        }
        if n_votes < params["min_category_votes"] or n_models < 2:
            entry["status"] = "insufficient"
            entry["reason"] = (
                ViewReason(code="too_few_votes", votes=n_votes, needed=params["min_category_votes"])
                if n_votes < params["min_category_votes"]
                else ViewReason(code="too_few_models", votes=n_votes)
            )
            entry["provisional"] = {
                style: _everyone_provisional(votes.view(category, style), public)
                for style in STYLES
            }
            categories.append(entry)
            continue
        reasons: dict[str, ViewReason | str] = {}
        provisional: dict[str, list[ProvisionalEntry]] = {}
        for style in STYLES:
            try:
                audited = category.key in FRAGILITY_CATEGORIES
                view_params = params if audited else {**params, "fragility_top": 0}
                result = votes.fit(category, style, view_params, shown=public)
            except engine.CannotRateError as exc:
                # Too few votes to rate this view: an ordinary state, listed, not an error.
                logger.info("ratings: %s, style %s not rated: %s", category.key, style, exc)
                if exc.provisional:
                    reasons[style] = ViewReason(code="no_comparable_models")
                    provisional[style] = [
                        _entry(e.model, e, e.reason) for e in exc.provisional if e.model in public
                    ]
                else:
                    # The exception's text is the log's (above), never the visitors'.
                    reasons[style] = ViewReason(code="fit_failed", error=type(exc).__name__)
                    provisional[style] = _everyone_provisional(votes.view(category, style), public)
                continue
            except Exception:
                logger.exception("ratings: %s, style %s failed", category.key, style)
                raise
            for warning in result.method.warnings:
                logger.warning("ratings: %s, style %s: %s", category.key, style, warning)
            if category.key == SAMPLING_VIEW[0] and style == SAMPLING_VIEW[1]:
                sampling_se = _sampling_se(result)
                established = sorted(m.model for m in result.models if not m.preliminary)
            # JSON at the edge: NaN and infinities (never valid JSON) become None.
            entry["results"][style] = cast(
                engine.RatingResultDict, _finite(_public_only(result, public).to_dict())
            )
        if reasons:
            entry["reasons"] = reasons
            entry["provisional"] = provisional
        if len(reasons) == 2:
            entry["status"] = "insufficient"
            entry["reason"] = reasons["off"]
        categories.append(entry)
    rated = votes.models()
    return {
        "schema": PAYLOAD_SCHEMA,
        "models": {
            slug: ModelMeta(
                name=m["name"],
                organization=m["organization"],
                license=m["license"],
                active=m["active"],
            )
            for slug, m in sorted(models.items())
            if slug in rated and slug in public
        },
        "categories": categories,
        "sampling": {
            "se": sampling_se,
            "counts": votes.pair_counts(),
            "established": established,
        },
        "records": [r for r in votes.pair_records() if r[0] in public and r[1] in public],
    }


# The view active pair sampling reads: every rated vote, without style control (the plain
# Bradley-Terry ratings the pairs' outcomes follow).
SAMPLING_VIEW = ("overall", "off")


def _sampling_se(result: engine.RatingResult) -> dict[str, float]:
    """Each rated model's standard error (rating points) from its 95% interval, every model
    included: private variants are drawn too, so their intervals matter to the draw."""
    se: dict[str, float] = {}
    for m in result.models:
        value = (m.rating_upper - m.rating_lower) / (2 * 1.959963984540054)
        if math.isfinite(value):
            se[m.model] = value
    return se


def sampling_publish(snapshot: LeaderboardSnapshot) -> None:
    """Hand the snapshot's sampling inputs to the arena (``arena.sampling.store``).

    Called after the snapshot commits, and by a refresh that finds nothing new when the arena's
    copy is missing or older (a cache flush), so the draw never stays on weights alone for long.
    A failure is logged: the draw falls back to the sampling weights meanwhile.
    """
    inputs: SamplingInputs | None = snapshot_payload_sampling(snapshot)
    if inputs is None:
        return
    try:
        sampling_stats_store(
            snapshot_id=snapshot.pk,
            computed_at=snapshot.created_at,
            se=inputs["se"],
            counts=[(str(a), str(b), int(n)) for a, b, n in inputs["counts"]],
            established=inputs.get("established"),
        )
    except Exception:
        logger.exception("ratings: could not publish the sampling statistics")


def snapshot_payload_sampling(snapshot: LeaderboardSnapshot) -> SamplingInputs | None:
    payload = cast(SnapshotPayload, snapshot.payload)
    return payload.get("sampling")


def excluded_counts() -> ExcludedCounts:
    """The votes the leaderboard leaves out, by reason (``arena.transparency``), with the
    copies of repeated visitors' prompts past ``RATINGS_DUPLICATE_PROMPT_CAP``."""
    cap = settings.RATINGS_DUPLICATE_PROMPT_CAP
    bound = source_cap()
    counts = votes_excluded_counts(duplicate_cap=cap, source_cap=bound)
    return {
        "named": counts.named,
        "flagged": counts.flagged,
        "by_reason": counts.by_reason,
        "duplicate_prompts": {
            "votes": counts.repeated.votes,
            "prompts": counts.repeated.prompts,
            "cap": cap,
        },
        "source_cap": {
            "votes": counts.source_capped.votes,
            "sources": counts.source_capped.sources,
            "min_votes": bound.min_votes,
            "share": bound.share,
        },
    }


def _advisory_xact_lock(key: int) -> None:
    """Wait for the transaction-scoped advisory lock ``key`` (released at commit or rollback).

    SQLite has one writer process in this project's setups (local and tests), so there is
    nothing to serialise against and the lock is a no-op there.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


@dataclass(frozen=True)
class _VotesState:
    """What "the same votes" compares (``snapshot_refresh``)."""

    high_water: int
    n_votes: int
    decided: int
    streamed: bool
    params: dict[str, Any]
    excluded: ExcludedCounts


def _votes_state() -> _VotesState:
    high_water, n_votes, decided = rating_votes_mark()
    # The Parquet path is PostgreSQL's COPY; SQLite (the demo's, the tests') loads the votes.
    streamed = connection.vendor == "postgresql" and n_votes > settings.RATINGS_STREAM_THRESHOLD
    return _VotesState(
        high_water=high_water,
        n_votes=n_votes,
        decided=decided,
        streamed=streamed,
        params=snapshot_params(streamed=streamed),
        excluded=excluded_counts(),
    )


def _covers(latest: LeaderboardSnapshot | None, state: _VotesState) -> bool:
    """Whether ``latest`` was computed from the same votes, flags and params as ``state``."""
    if latest is None:
        return False
    payload = cast(SnapshotPayload, latest.payload)
    return (
        latest.vote_high_water == state.high_water
        and latest.n_votes == state.n_votes
        and payload.get("reaction_decided", 0) == state.decided
        and latest.params_digest == params_digest(state.params)
        and payload.get("excluded") == state.excluded
    )


@dataclass(frozen=True)
class SnapshotRefreshResult:
    snapshot: LeaderboardSnapshot | None
    created: bool


def snapshot_refresh(*, force: bool = False) -> SnapshotRefreshResult:
    """Write a new snapshot unless the latest one already covers the same votes and params.

    "The same votes" is the same high-water mark (largest vote id) and the same count, so a vote
    that commits late with a lower id, or one flagged since, still triggers a run; with
    RATINGS_COUNT_REACTIONS, the same ties decided by reactions as well. Runs are
    serialised by a PostgreSQL advisory lock held for the transaction: a second run waits, then
    sees the first one's snapshot and does nothing. The counts of excluded votes by reason are
    part of "the same votes": a flag added, changed or cleared writes a new snapshot. After a
    snapshot commits, its sampling inputs go to the arena (``sampling_publish``). ``force``
    writes a snapshot regardless
    (staff's "Recompute now", e.g. after editing a model's name or visibility).

    More than ``RATINGS_STREAM_THRESHOLD`` votes are not loaded at once: they are written to a
    temporary Parquet file in ``RATINGS_SPILL_DIR`` through one ``COPY`` and fitted from
    it a batch at a time (``snapshot_build_streamed``); the file is deleted afterwards.
    """
    with transaction.atomic():
        _advisory_xact_lock(SNAPSHOT_LOCK_KEY)
        started = time.monotonic()
        latest = snapshot_latest()
        state = _votes_state()
        if force or not _covers(latest, state):
            # Something changed: the burst test first (it flags or lifts), then what it left.
            if settings.RATINGS_COHORT_TEST:
                run = cohorts_quarantine_run(announce=False)
                if run.flagged or run.lifted:
                    state = _votes_state()
        if not force and _covers(latest, state):
            assert latest is not None  # noqa: S101  (_covers says so)
            if sampling_stats_snapshot_id() != latest.pk:
                sampling_publish(latest)
            return SnapshotRefreshResult(snapshot=latest, created=False)
        streamed, params, excluded, decided = (
            state.streamed,
            state.params,
            state.excluded,
            state.decided,
        )
        digest = params_digest(params)
        if streamed:
            payload, written = snapshot_build_streamed(models=models_metadata(), params=params)
            rated_high_water, rated_votes = written.high_water, written.rows
        else:
            battles = rating_battles()
            payload = snapshot_build(battles, models=models_metadata(), params=params)
            rated_high_water = int(battles["vote_id"].max()) if len(battles) else 0
            rated_votes = len(battles)
        payload["excluded"] = excluded
        payload["reaction_decided"] = decided
        payload["by_source"] = rated_votes_by_source()
        # What /transparency lists, counted once here rather than on every visit.
        payload["served"] = served_summary_json(models_served())
        payload["ledger"] = ledger_counts_json(ledger_counts())
        snapshot = LeaderboardSnapshot.objects.create(
            vote_high_water=rated_high_water,
            n_votes=rated_votes,
            params=params,
            params_digest=digest,
            duration_seconds=time.monotonic() - started,
            payload=payload,
        )
        after_commit(lambda: sampling_publish(snapshot))
    logger.info(
        "ratings: snapshot %s from %s votes in %.2fs",
        snapshot.pk,
        snapshot.n_votes,
        snapshot.duration_seconds,
    )
    return SnapshotRefreshResult(snapshot=snapshot, created=True)
