"""Reads for the ratings side: the votes to rate, the models to describe, the latest snapshot.

Arena's votes are read only through ``arena.selectors.votes_for_rating``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.db.models import Count, Max

from answer_style import CONV_METADATA_KEYS
from arena.models import ArenaModel
from arena.selectors import votes_for_rating
from ratings.engine import ModelRatingDict, RatingResultDict
from ratings.models import LeaderboardSnapshot
from ratings.payload import CategoryEntry, ModelMeta, ProvisionalEntry, SnapshotPayload

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# pandas, numpy and pyarrow are imported by the functions that read votes for a fit (a Celery
# worker's, or a command's), so the web worker that shows the leaderboard does not load them.

STYLE_OPTIONS = ("on", "off")
DEFAULT_CATEGORY = "overall"

#: A provisional model's reason, in words (``ratings.payload.SnapshotReason``).
PROVISIONAL_REASON_TEXT = {
    "no_losses": "No rated model has beaten or tied it yet, directly or through others, so its "
    "rating has no upper bound.",
    "no_wins": "It has not beaten or tied a rated model yet, directly or through others, so its "
    "rating has no lower bound.",
    "not_connected": "It has not met the rated models, directly or through others, so its rating "
    "cannot be put on their scale.",
    "few_votes": "This view has too few votes to rate any model yet.",
}

BATTLE_COLUMNS = {
    "id": "vote_id",
    "battle__model_a__slug": "model_a",
    "battle__model_b__slug": "model_b",
    "winner": "winner",
    "style": "conv_metadata",
    "battle__prompt__category": "prompt_category",
    "battle__prompt__language": "language",
    "turns": "turns",
    "prompt_chars": "prompt_chars",
    "prompt_has_code": "prompt_has_code",
}


def rating_votes_mark() -> tuple[int, int]:
    """The votes' high-water mark (largest id, 0 when none) and their count."""
    totals = votes_for_rating().aggregate(high=Max("id"), n=Count("id"))
    return int(totals["high"] or 0), int(totals["n"])


def rating_battles() -> pd.DataFrame:
    """The rated votes as a battle table in vote-id order, one row per vote."""
    return _battles_frame(list(votes_for_rating().values_list(*BATTLE_COLUMNS)))


#: The spill's style columns: the flat counts of ``conv_metadata`` (zeros where a vote lacks
#: them) and whether the vote has them all (the style-controlled views' votes).
SPILL_STYLE_COLUMNS = tuple(CONV_METADATA_KEYS)
STYLE_COMPLETE_COLUMN = "style_complete"
_SPILL_TEXT = ("model_a", "model_b", "winner", "prompt_category", "language")


def _spill_schema() -> pa.Schema:
    import pyarrow as pa

    fields = [pa.field("vote_id", pa.int64(), nullable=False)]
    fields += [pa.field(c, pa.dictionary(pa.int32(), pa.string())) for c in _SPILL_TEXT]
    fields += [pa.field(c, pa.int64()) for c in ("turns", "prompt_chars")]
    fields += [pa.field("prompt_has_code", pa.bool_()), pa.field(STYLE_COMPLETE_COLUMN, pa.bool_())]
    fields += [pa.field(c, pa.int64()) for c in SPILL_STYLE_COLUMNS]
    return pa.schema(fields)


def style_complete(meta: Any) -> bool:
    """Whether a vote's ``conv_metadata`` holds every style count (style control uses it)."""
    return isinstance(meta, dict) and all(k in meta for k in CONV_METADATA_KEYS)


def _battles_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(BATTLE_COLUMNS.values()))
    for column in ("prompt_category", "language"):
        frame[column] = frame[column].fillna("")
    return frame


def _spill_batch(frame: pd.DataFrame, schema: pa.Schema) -> pa.RecordBatch:
    """``frame`` (``rating_battles``' columns) in the spill's schema."""
    import numpy as np
    import pyarrow as pa

    from ratings.engine import flatten_conv_metadata

    complete = frame["conv_metadata"].map(style_complete).astype(bool).to_numpy()
    counts = {c: np.zeros(len(frame), dtype=np.int64) for c in SPILL_STYLE_COLUMNS}
    if complete.any():
        flat = flatten_conv_metadata(frame.loc[complete, ["conv_metadata"]])
        for column in SPILL_STYLE_COLUMNS:
            counts[column][complete] = flat[column].to_numpy(dtype=np.int64)
    columns: dict[str, Any] = {
        c: frame[c].astype("int64").to_numpy() for c in ("vote_id", "turns", "prompt_chars")
    }
    columns.update({c: frame[c].astype(str).to_numpy(dtype=object) for c in _SPILL_TEXT})
    columns["prompt_has_code"] = frame["prompt_has_code"].astype(bool).to_numpy()
    columns[STYLE_COMPLETE_COLUMN] = complete
    columns.update(counts)
    arrays = [
        pa.array(columns[f.name], type=f.type.value_type).dictionary_encode()
        if pa.types.is_dictionary(f.type)
        else pa.array(columns[f.name], type=f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def rating_battle_batches(*, batch_rows: int) -> Iterator[pd.DataFrame]:
    """``rating_battles()`` in vote-id order, ``batch_rows`` votes at a time.

    On PostgreSQL ``QuerySet.iterator`` reads through a server-side (named) cursor, so at most
    one batch of rows is held here whatever the number of votes; the votes come from the same
    query as ``rating_battles`` (``arena.selectors.votes_for_rating``), so the same votes are
    excluded. Call it inside a transaction: the cursor lives until the transaction ends.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    rows = votes_for_rating().values_list(*BATTLE_COLUMNS).iterator(chunk_size=batch_rows)
    while batch := list(islice(rows, batch_rows)):
        yield _battles_frame(batch)


@dataclass(frozen=True)
class BattleSpill:
    """What ``rating_battles_spill`` wrote: votes, Parquet row groups, largest vote id."""

    rows: int
    row_groups: int
    high_water: int


def rating_battles_spill(
    path: Path,
    *,
    batch_rows: int,
    observe: Callable[[pd.DataFrame], None] | None = None,
) -> BattleSpill:
    """Write the rated votes to the Parquet file ``path``, one row group per ``batch_rows`` votes.

    Columns: ``vote_id``; ``model_a``, ``model_b``, ``winner``, ``prompt_category`` and
    ``language`` dictionary-encoded; ``turns``, ``prompt_chars``, ``prompt_has_code`` (what the
    leaderboard's categories read); ``style_complete`` and the flat style counts of
    ``answer_style.CONV_METADATA_KEYS`` (zero where ``style_complete`` is false), which
    ``ratings.engine.read_battles`` accepts. ``observe`` sees each batch as ``rating_battles``
    would have shaped it, before the next one is read (memory stays at about one batch).
    """
    import pyarrow.parquet as pq

    schema = _spill_schema()
    rows = groups = high = 0
    with pq.ParquetWriter(path, schema) as writer:
        for frame in rating_battle_batches(batch_rows=batch_rows):
            writer.write_batch(_spill_batch(frame, schema), row_group_size=len(frame))
            if observe is not None:
                observe(frame)
            rows += len(frame)
            groups += 1
            high = max(high, int(frame["vote_id"].max()))
    return BattleSpill(rows=rows, row_groups=groups, high_water=high)


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
    def reason(self) -> str:
        """Why this view has no result (a category or one style setting short of votes)."""
        reasons = self.category.get("reasons") or {}
        return str(reasons.get(self.style) or self.category.get("reason") or "")

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
