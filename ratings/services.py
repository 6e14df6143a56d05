"""Writing leaderboard snapshots: categories, the fits, the lock and the no-op rule.

A snapshot is computed from the anonymous, unflagged votes (``ratings.selectors``) by the
Django-free engine (``ratings.engine``) for each category, with and without style control, and
stored as one immutable ``LeaderboardSnapshot`` row that the page and the downloads read.

Categories (a battle belongs to every one whose rule it meets):

- ``overall``: every rated vote.
- ``coding``: the prompt's category is ``coding``, or a user turn holds a fenced code block.
- ``long_prompts``: the user turns shown hold ``RATINGS_LONG_PROMPT_CHARS`` characters or more
  in total (500 by default).
- ``multi_turn``: the battle showed more than one user turn.
- ``lang-<code>``, one per language present: the prompt's ``language`` field, lowercased and
  without its region (``en-US`` counts as ``en``); ``lang-en`` is "English".

Within a view (a category with style control on or off; "on" uses the votes that carry style
counts) the engine rates the largest set of models where ratings exist and lists every other
model as provisional with its record and reason (``ratings.engine.identify``): a model that has
only won so far, one that has only lost, live models that never met the pool. A view is
``"insufficient"`` only when fewer than two models can be rated, when the category has fewer
than ``RATINGS_MIN_CATEGORY_VOTES`` votes, or when the style-controlled fit has no maximum on a
handful of votes (the engine's ``CannotRateError``); it then lists every model as provisional
(reason ``few_votes`` for models the engine would otherwise rate). Any other error is a bug:
it is logged and fails the run, and the previous snapshot stays on the page.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import connection, transaction
from django.utils.translation import get_language_info

from answer_style import CONV_METADATA_KEYS
from arena.sampling_stats import sampling_stats_snapshot_id
from arena.services.sampling import sampling_stats_store
from arena.transparency import votes_excluded_counts
from ratings import engine
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
)
from ratings.selectors import models_metadata, rating_battles, rating_votes_mark, snapshot_latest

logger = logging.getLogger(__name__)

# Key of the PostgreSQL advisory lock that serialises snapshot runs (any fixed 64-bit integer).
SNAPSHOT_LOCK_KEY = 0x5241_5449_4E47  # "RATING"
CODING_CATEGORY = "coding"


@dataclass(frozen=True)
class Category:
    key: str
    label: str
    description: str
    select: Callable[[pd.DataFrame], pd.Series]


def _language_code(value: str) -> str:
    return value.strip().lower().replace("_", "-").split("-")[0]


def _language_label(code: str) -> str:
    try:
        return str(get_language_info(code)["name"])
    except KeyError:
        return code.upper()


def _language_selector(code: str) -> Callable[[pd.DataFrame], pd.Series]:
    def select(df: pd.DataFrame) -> pd.Series:
        return df["language"].map(_language_code) == code

    return select


def snapshot_categories(battles: pd.DataFrame, *, long_prompt_chars: int) -> list[Category]:
    """The fixed categories, then one per language present (most votes first)."""
    categories = [
        Category(
            "overall",
            "Overall",
            "Every anonymous, unflagged vote.",
            lambda df: df["winner"].notna(),
        ),
        Category(
            "coding",
            "Coding",
            "Prompts in the coding category or holding a fenced code block.",
            lambda df: (
                (df["prompt_category"].str.lower() == CODING_CATEGORY)
                | df["prompt_has_code"].astype(bool)
            ),
        ),
        Category(
            "long_prompts",
            "Long prompts",
            f"User turns of {long_prompt_chars} characters or more in total.",
            lambda df: df["prompt_chars"] >= long_prompt_chars,
        ),
        Category(
            "multi_turn",
            "Multi-turn",
            "Battles over more than one user turn.",
            lambda df: df["turns"] > 1,
        ),
    ]
    codes = battles["language"].map(_language_code) if len(battles) else pd.Series(dtype=str)
    for code in codes[codes != ""].value_counts().index:
        categories.append(
            Category(
                f"lang-{code}",
                _language_label(code),
                f"Prompts whose language is {code!r}.",
                _language_selector(code),
            )
        )
    return categories


def snapshot_params() -> dict[str, Any]:
    """Everything that shapes a snapshot besides the votes; part of the no-op rule."""
    return {
        "ci": settings.RATINGS_CI,
        "rounds": settings.RATINGS_BOOTSTRAP_ROUNDS if settings.RATINGS_CI == "bootstrap" else None,
        "seed": settings.RATINGS_SEED,
        "min_category_votes": settings.RATINGS_MIN_CATEGORY_VOTES,
        "long_prompt_chars": settings.RATINGS_LONG_PROMPT_CHARS,
        "votes": "anonymous, unflagged",
        "schema": PAYLOAD_SCHEMA,
    }


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

    Their votes still inform everyone else's rating; ranks are recomputed among those shown.
    """
    shown = [m for m in result.models if m.model in public]
    ranks = engine.upper_bound_ranks(
        np.array([m.rating_lower for m in shown], dtype=float),
        np.array([m.rating_upper for m in shown], dtype=float),
    )
    elo = result.online_elo
    return replace(
        result,
        models=tuple(replace(m, rank=rank) for m, rank in zip(shown, ranks, strict=True)),
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


def _style_complete(meta: Any) -> bool:
    return isinstance(meta, dict) and all(k in meta for k in CONV_METADATA_KEYS)


def _fit(
    battles: pd.DataFrame, *, style_control: bool, params: dict[str, Any]
) -> engine.RatingResult:
    columns = ["model_a", "model_b", "winner"]
    if style_control:
        frame = engine.flatten_conv_metadata(battles[[*columns, "conv_metadata"]])
    else:
        frame = battles[columns]
    return engine.rate(
        frame.reset_index(drop=True),
        style_control=style_control,
        ci=params["ci"],
        rounds=params["rounds"] or 100,
        seed=params["seed"],
        workers=settings.RATINGS_BOOTSTRAP_WORKERS,  # not in params: results do not depend on it
    )


def snapshot_build(
    battles: pd.DataFrame, *, models: dict[str, dict[str, Any]], params: dict[str, Any]
) -> SnapshotPayload:
    """The snapshot payload: each category fitted with and without style control."""
    public = {slug for slug, m in models.items() if m.get("public", True)}
    styled = battles["conv_metadata"].map(_style_complete) if len(battles) else battles["winner"]
    categories = []
    sampling_se: dict[str, float] = {}
    for category in snapshot_categories(battles, long_prompt_chars=params["long_prompt_chars"]):
        subset = battles[category.select(battles)] if len(battles) else battles
        n_models = len(set(subset["model_a"]) | set(subset["model_b"]))
        entry: CategoryEntry = {
            "key": category.key,
            "label": category.label,
            "description": category.description,
            "n_votes": len(subset),
            "status": "ok",
            "reason": "",
            "results": {"on": None, "off": None},
        }
        views = {
            "on": subset[styled.loc[subset.index].astype(bool)] if len(subset) else subset,
            "off": subset,
        }
        if len(subset) < params["min_category_votes"] or n_models < 2:
            entry["status"] = "insufficient"
            entry["reason"] = (
                f"Not enough votes yet: {len(subset)} votes over {n_models} models "
                f"(at least {params['min_category_votes']} votes and 2 models are needed)."
            )
            entry["provisional"] = {
                style: _everyone_provisional(rows, public) for style, rows in views.items()
            }
            categories.append(entry)
            continue
        reasons: dict[str, str] = {}
        provisional: dict[str, list[ProvisionalEntry]] = {}
        for style, rows in views.items():
            try:
                result = _fit(rows, style_control=style == "on", params=params)
            except engine.CannotRateError as exc:
                # Too few votes to rate this view: an ordinary state, listed, not an error.
                logger.info("ratings: %s, style %s not rated: %s", category.key, style, exc)
                if exc.provisional:
                    reasons[style] = (
                        "No two models can be rated yet: each model in this view has won every "
                        "comparison, lost every one, or not met the others."
                    )
                    provisional[style] = [
                        _entry(e.model, e, e.reason) for e in exc.provisional if e.model in public
                    ]
                else:
                    reasons[style] = f"Not enough votes yet to rate this view ({exc})."
                    provisional[style] = _everyone_provisional(rows, public)
                continue
            except Exception:
                logger.exception("ratings: %s, style %s failed", category.key, style)
                raise
            if category.key == SAMPLING_VIEW[0] and style == SAMPLING_VIEW[1]:
                sampling_se = _sampling_se(result)
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
    rated = set(battles["model_a"]) | set(battles["model_b"])
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
        "sampling": {"se": sampling_se, "counts": _pair_counts(battles)},
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


def _pair_counts(battles: pd.DataFrame) -> list[tuple[str, str, int]]:
    """Rated battles per unordered pair of models, ``[slug, slug, n]`` (slugs in order)."""
    if not len(battles):
        return []
    a = battles["model_a"].astype(str)
    b = battles["model_b"].astype(str)
    low = a.where(a < b, b)
    high = b.where(a < b, a)
    counts = pd.DataFrame({"low": low, "high": high}).value_counts(sort=False)
    return [(str(x), str(y), int(n)) for (x, y), n in sorted(counts.items())]


def sampling_publish(snapshot: LeaderboardSnapshot) -> None:
    """Hand the snapshot's sampling inputs to the arena (``arena.services.sampling``).

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
        )
    except Exception:
        logger.exception("ratings: could not publish the sampling statistics")


def snapshot_payload_sampling(snapshot: LeaderboardSnapshot) -> SamplingInputs | None:
    payload = cast(SnapshotPayload, snapshot.payload)
    return payload.get("sampling")


def excluded_counts() -> ExcludedCounts:
    """The votes the leaderboard leaves out, by reason (``arena.transparency``)."""
    counts = votes_excluded_counts()
    return {"named": counts.named, "flagged": counts.flagged, "by_reason": counts.by_reason}


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
class SnapshotRefreshResult:
    snapshot: LeaderboardSnapshot | None
    created: bool


def snapshot_refresh(*, force: bool = False) -> SnapshotRefreshResult:
    """Write a new snapshot unless the latest one already covers the same votes and params.

    "The same votes" is the same high-water mark (largest vote id) and the same count, so a vote
    that commits late with a lower id, or one flagged since, still triggers a run. Runs are
    serialised by a PostgreSQL advisory lock held for the transaction: a second run waits, then
    sees the first one's snapshot and does nothing. The counts of excluded votes by reason are
    part of "the same votes": a flag added, changed or cleared writes a new snapshot. After a
    snapshot commits, its sampling inputs go to the arena (``sampling_publish``). ``force``
    writes a snapshot regardless
    (staff's "Recompute now", e.g. after editing a model's name or visibility).
    """
    params = snapshot_params()
    digest = params_digest(params)
    with transaction.atomic():
        _advisory_xact_lock(SNAPSHOT_LOCK_KEY)
        started = time.monotonic()
        high_water, n_votes = rating_votes_mark()
        excluded = excluded_counts()
        latest = snapshot_latest()
        if (
            not force
            and latest is not None
            and latest.vote_high_water == high_water
            and latest.n_votes == n_votes
            and latest.params_digest == digest
            and cast(SnapshotPayload, latest.payload).get("excluded") == excluded
        ):
            if sampling_stats_snapshot_id() != latest.pk:
                sampling_publish(latest)
            return SnapshotRefreshResult(snapshot=latest, created=False)
        battles = rating_battles()
        payload = snapshot_build(battles, models=models_metadata(), params=params)
        payload["excluded"] = excluded
        snapshot = LeaderboardSnapshot.objects.create(
            vote_high_water=int(battles["vote_id"].max()) if len(battles) else 0,
            n_votes=len(battles),
            params=params,
            params_digest=digest,
            duration_seconds=time.monotonic() - started,
            payload=payload,
        )
        transaction.on_commit(lambda: sampling_publish(snapshot))
    logger.info(
        "ratings: snapshot %s from %s votes in %.2fs",
        snapshot.pk,
        snapshot.n_votes,
        snapshot.duration_seconds,
    )
    return SnapshotRefreshResult(snapshot=snapshot, created=True)
