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

Past ``RATINGS_STREAM_THRESHOLD`` votes the same payload is built from a Parquet spill of the
votes, a batch at a time (``snapshot_build_streamed``), with sandwich intervals and without the
online Elo, which the streamed engine does not replay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
from django.conf import settings
from django.db import connection, transaction
from django.utils.translation import get_language_info

from arena.sampling.stats import sampling_stats_snapshot_id
from arena.sampling.store import sampling_stats_store
from arena.transparency import votes_excluded_counts
from ratings import engine
from ratings.cli import parse_anchor
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
from ratings.selectors import (
    STYLE_COMPLETE_COLUMN,
    BattleSpill,
    models_metadata,
    rated_votes_by_source,
    rating_battles,
    rating_battles_spill,
    rating_votes_mark,
    snapshot_latest,
    source_cap,
    style_complete,
)

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

BoolArray = npt.NDArray[np.bool_]

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


def _language_counts(languages: pd.Series) -> dict[str, int]:
    """Votes per language code (``""`` left out), in order of first appearance."""
    codes = languages.map(_language_code)
    return {str(code): int(n) for code, n in codes[codes != ""].value_counts(sort=False).items()}


def snapshot_categories(battles: pd.DataFrame, *, long_prompt_chars: int) -> list[Category]:
    """The fixed categories, then one per language present (most votes first)."""
    languages = _language_counts(battles["language"]) if len(battles) else {}
    return _categories(languages, long_prompt_chars=long_prompt_chars)


def _categories(languages: dict[str, int], *, long_prompt_chars: int) -> list[Category]:
    """The fixed categories, then one per language of ``languages`` (votes per code, in order
    of first appearance): most votes first, ties in order of first appearance."""
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
    for code in sorted(languages, key=lambda c: -languages[c]):  # stable: ties keep their order
        categories.append(
            Category(
                f"lang-{code}",
                _language_label(code),
                f"Prompts whose language is {code!r}.",
                _language_selector(code),
            )
        )
    return categories


def snapshot_params(*, streamed: bool = False) -> dict[str, Any]:
    """Everything that shapes a snapshot besides the votes; part of the no-op rule.

    ``streamed``: the votes are past ``RATINGS_STREAM_THRESHOLD`` and are fitted from a Parquet
    spill (``snapshot_refresh``), which computes sandwich intervals only: ``ci`` then says
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
        "votes": "anonymous, unflagged",
        "schema": PAYLOAD_SCHEMA,
    }
    if streamed:
        if params["ci"] != "sandwich":
            params["ci_requested"] = params["ci"]
        params.update(ci="sandwich", rounds=None, streamed=True)
    return params


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

    Their votes still inform everyone else's rating; ranks are recomputed among those shown
    (a preliminary model still never above an established one).
    """
    shown = [m for m in result.models if m.model in public]
    ranks = engine.leaderboard_ranks(
        np.array([m.rating_lower for m in shown], dtype=float),
        np.array([m.rating_upper for m in shown], dtype=float),
        np.array([m.preliminary for m in shown], dtype=bool),
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


def _anchor(params: dict[str, Any]) -> tuple[str, float] | None:
    """``RATINGS_ANCHOR_MODEL`` (``slug=rating``, checked at start) as the engine's anchor."""
    return parse_anchor(params["anchor"]) if params.get("anchor") else None


def _scale_options(params: dict[str, Any]) -> dict[str, Any]:
    """The scale's options, the same for the in-memory and the streamed fit: centred on the
    established models, or on the anchor, falling back with a warning where it cannot serve."""
    return {
        "anchor": _anchor(params),
        "anchor_fallback": True,
        "established_min_votes": params.get("established_min_votes", 0),
    }


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
        **_scale_options(params),
    )


STYLES = ("on", "off")  # style control on (the votes with style counts) and off (every vote)


class _Votes(Protocol):
    """The rated votes as ``snapshot_build`` reads them: in memory, or spilled to Parquet."""

    def categories(self, *, long_prompt_chars: int) -> list[Category]: ...

    def census(self, category: Category) -> tuple[int, int]:
        """The category's votes and the models in them."""
        ...

    def view(self, category: Category, style: str) -> pd.DataFrame:
        """The view's battles: at least ``model_a``, ``model_b``, ``winner``."""
        ...

    def fit(self, category: Category, style: str, params: dict[str, Any]) -> engine.RatingResult:
        """The view's fit; ``engine.CannotRateError`` when it cannot be rated."""
        ...

    def models(self) -> set[str]: ...

    def pair_counts(self) -> list[tuple[str, str, int]]: ...


class _FrameVotes:
    """The votes in one DataFrame (``rating_battles``)."""

    def __init__(self, battles: pd.DataFrame) -> None:
        self.battles = battles
        self.styled = battles["conv_metadata"].map(style_complete) if len(battles) else None
        self._subset: tuple[str, pd.DataFrame] | None = None  # the current category's rows

    def categories(self, *, long_prompt_chars: int) -> list[Category]:
        return snapshot_categories(self.battles, long_prompt_chars=long_prompt_chars)

    def _rows(self, category: Category) -> pd.DataFrame:
        if self._subset is None or self._subset[0] != category.key:
            battles = self.battles
            rows = battles[category.select(battles)] if len(battles) else battles
            self._subset = (category.key, rows)
        return self._subset[1]

    def census(self, category: Category) -> tuple[int, int]:
        rows = self._rows(category)
        return len(rows), len(set(rows["model_a"]) | set(rows["model_b"]))

    def view(self, category: Category, style: str) -> pd.DataFrame:
        rows = self._rows(category)
        if style == "on" and len(rows) and self.styled is not None:
            return rows[self.styled.loc[rows.index].astype(bool)]
        return rows

    def fit(self, category: Category, style: str, params: dict[str, Any]) -> engine.RatingResult:
        rows = self.view(category, style)
        return _fit(rows, style_control=style == "on", params=params)

    def models(self) -> set[str]:
        return set(self.battles["model_a"]) | set(self.battles["model_b"])

    def pair_counts(self) -> list[tuple[str, str, int]]:
        return _pair_counts(self.battles)


# Rows per batch when the spill is read back. A spilled row is a few numeric and dictionary
# columns (RATINGS_STREAM_BATCH_ROWS, the row group written per COPY batch, may be as large).
SPILL_READ_ROWS = 50_000

# What a category's rule and the style views read from the spill.
_SELECT_COLUMNS = [
    "winner",
    "prompt_category",
    "prompt_has_code",
    "prompt_chars",
    "turns",
    "language",
    STYLE_COMPLETE_COLUMN,
]


class _SpillVotes:
    """The votes spilled to Parquet (``rating_battles_spill``), read back a batch at a time.

    The spill pass itself counts what needs every vote once (languages, models, pairs); each
    category's census is one more pass over the selection columns; each fit is
    ``engine.rate_parquet`` with a row mask that applies the same ``Category.select`` to each
    batch (and, with style control, keeps the votes with style counts).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.batch_rows = SPILL_READ_ROWS
        self._census: dict[str, tuple[int, int]] = {}
        self._categories: list[Category] = []
        self.restart()

    def restart(self) -> None:
        """Forget what the spill pass counted (the spill is being written again)."""
        self.languages: dict[str, int] = {}
        self.rated: set[str] = set()
        self.pairs: Counter[tuple[str, str]] = Counter()

    def observe(self, batch: pa.RecordBatch) -> None:
        """Count one spilled batch (the spill's schema) as ``_language_counts``, ``models`` and
        ``_pair_counts`` count a frame: per dictionary entry, not per row."""
        language = batch.column("language")
        per_value = np.bincount(language.indices, minlength=len(language.dictionary))
        # A batch's dictionary lists its values in order of first appearance, so the codes
        # are met in that order too.
        for value, n in zip(language.dictionary.to_pylist(), per_value.tolist(), strict=True):
            code = _language_code(value)
            if code and n:
                self.languages[code] = self.languages.get(code, 0) + n
        a, b = batch.column("model_a"), batch.column("model_b")
        slugs_a, slugs_b = a.dictionary.to_pylist(), b.dictionary.to_pylist()
        self.rated.update(slugs_a, slugs_b)
        # Each slug's rank in string order: the smaller rank of a pair is its first slug.
        ordered = sorted(set(slugs_a) | set(slugs_b))
        rank = {slug: i for i, slug in enumerate(ordered)}
        rank_a = np.array([rank[s] for s in slugs_a], dtype=np.int64)[a.indices]
        rank_b = np.array([rank[s] for s in slugs_b], dtype=np.int64)[b.indices]
        low, high = np.minimum(rank_a, rank_b), np.maximum(rank_a, rank_b)
        keys, counts = np.unique(low * len(ordered) + high, return_counts=True)
        for key, n in zip(keys.tolist(), counts.tolist(), strict=True):
            self.pairs[(ordered[key // len(ordered)], ordered[key % len(ordered)])] += n

    def _batches(self, columns: list[str]) -> Iterator[pd.DataFrame]:
        import pyarrow.parquet as pq  # only a streamed refit reads Parquet

        parquet = pq.ParquetFile(self.path)
        for batch in parquet.iter_batches(batch_size=self.batch_rows, columns=columns):
            yield batch.to_pandas()

    def categories(self, *, long_prompt_chars: int) -> list[Category]:
        self._categories = _categories(self.languages, long_prompt_chars=long_prompt_chars)
        return self._categories

    def census(self, category: Category) -> tuple[int, int]:
        if not self._census:
            # One pass for every category: votes and the set of models each one holds.
            votes = dict.fromkeys((c.key for c in self._categories), 0)
            models: dict[str, set[str]] = {c.key: set() for c in self._categories}
            for frame in self._batches([*_SELECT_COLUMNS, "model_a", "model_b"]):
                for c in self._categories:
                    keep = c.select(frame).to_numpy(dtype=bool)
                    votes[c.key] += int(keep.sum())
                    models[c.key].update(frame["model_a"].to_numpy(dtype=object)[keep])
                    models[c.key].update(frame["model_b"].to_numpy(dtype=object)[keep])
            self._census = {key: (votes[key], len(models[key])) for key in votes}
        return self._census[category.key]

    def _where(self, category: Category, style: str) -> Callable[[pa.RecordBatch], BoolArray]:
        def where(batch: pa.RecordBatch) -> BoolArray:
            return _keep(batch.select(_SELECT_COLUMNS).to_pandas(), category, style)

        return where

    def view(self, category: Category, style: str) -> pd.DataFrame:
        # Only for views that are not rated (too few votes, or a style fit with no maximum):
        # their three columns are gathered in memory for the records of every model.
        parts = [
            frame.loc[_keep(frame, category, style), _TABLE]
            for frame in self._batches([*_SELECT_COLUMNS, *_TABLE])
        ]
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype=str) for c in _TABLE})
        return pd.concat(parts, ignore_index=True).astype(str)

    def fit(self, category: Category, style: str, params: dict[str, Any]) -> engine.RatingResult:
        return engine.rate_parquet(
            self.path,
            style_control=style == "on",
            ci="sandwich",  # the only interval the streamed fit computes (snapshot_params)
            where=self._where(category, style),
            where_columns=_SELECT_COLUMNS,
            batch_rows=self.batch_rows,
            spill_dir=self.path.parent,  # removed with the votes' spill
            **_scale_options(params),
        )

    def models(self) -> set[str]:
        return self.rated

    def pair_counts(self) -> list[tuple[str, str, int]]:
        return [(a, b, n) for (a, b), n in sorted(self.pairs.items())]


_TABLE = ["model_a", "model_b", "winner"]


def _keep(frame: pd.DataFrame, category: Category, style: str) -> BoolArray:
    """Which of the spilled rows ``frame`` are in the category's view ``style``."""
    keep: BoolArray = np.asarray(category.select(frame), dtype=bool)
    if style == "on":
        keep = keep & np.asarray(frame[STYLE_COMPLETE_COLUMN], dtype=bool)
    return keep


def snapshot_build(
    battles: pd.DataFrame, *, models: dict[str, dict[str, Any]], params: dict[str, Any]
) -> SnapshotPayload:
    """The snapshot payload: each category fitted with and without style control."""
    return _payload(_FrameVotes(battles), models=models, params=params)


def snapshot_build_streamed(
    *, models: dict[str, dict[str, Any]], params: dict[str, Any]
) -> tuple[SnapshotPayload, BattleSpill]:
    """``snapshot_build`` over the rated votes without holding them in memory.

    The votes are written to a Parquet file in a temporary directory under
    ``RATINGS_SPILL_DIR`` (the system's default when unset), ``RATINGS_STREAM_BATCH_ROWS`` at
    a time from one ``COPY`` (``ratings.selectors.rating_battles_spill``), and each
    view is fitted from it by ``engine.rate_parquet`` with sandwich intervals. The directory is
    removed when the build ends, whether it succeeds or fails.
    """
    batch_rows = settings.RATINGS_STREAM_BATCH_ROWS
    with tempfile.TemporaryDirectory(
        prefix="arena-ratings-", dir=settings.RATINGS_SPILL_DIR
    ) as tmp:
        votes = _SpillVotes(Path(tmp) / "votes.parquet")
        spill = rating_battles_spill(
            votes.path, batch_rows=batch_rows, observe=votes.observe, restart=votes.restart
        )
        logger.info(
            "ratings: %s votes spilled in %s row groups of up to %s",
            spill.rows,
            spill.row_groups,
            batch_rows,
        )
        return _payload(votes, models=models, params=params), spill


def _payload(
    votes: _Votes, *, models: dict[str, dict[str, Any]], params: dict[str, Any]
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
                f"Not enough votes yet: {n_votes} votes over {n_models} models "
                f"(at least {params['min_category_votes']} votes and 2 models are needed)."
            )
            entry["provisional"] = {
                style: _everyone_provisional(votes.view(category, style), public)
                for style in STYLES
            }
            categories.append(entry)
            continue
        reasons: dict[str, str] = {}
        provisional: dict[str, list[ProvisionalEntry]] = {}
        for style in STYLES:
            try:
                result = votes.fit(category, style, params)
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

    More than ``RATINGS_STREAM_THRESHOLD`` votes are not loaded at once: they are spilled to a
    temporary Parquet file in ``RATINGS_SPILL_DIR`` through one ``COPY`` and fitted from
    it a batch at a time (``snapshot_build_streamed``); the file is deleted afterwards.
    """
    with transaction.atomic():
        _advisory_xact_lock(SNAPSHOT_LOCK_KEY)
        started = time.monotonic()
        high_water, n_votes = rating_votes_mark()
        # The spill is PostgreSQL's COPY; SQLite (the demo's, the tests') loads the votes.
        streamed = connection.vendor == "postgresql" and n_votes > settings.RATINGS_STREAM_THRESHOLD
        params = snapshot_params(streamed=streamed)
        digest = params_digest(params)
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
        if streamed:
            payload, spill = snapshot_build_streamed(models=models_metadata(), params=params)
            rated_high_water, rated_votes = spill.high_water, spill.rows
        else:
            battles = rating_battles()
            payload = snapshot_build(battles, models=models_metadata(), params=params)
            rated_high_water = int(battles["vote_id"].max()) if len(battles) else 0
            rated_votes = len(battles)
        payload["excluded"] = excluded
        payload["by_source"] = rated_votes_by_source()
        snapshot = LeaderboardSnapshot.objects.create(
            vote_high_water=rated_high_water,
            n_votes=rated_votes,
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
