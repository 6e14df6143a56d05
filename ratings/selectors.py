"""Reads for the ratings side: the votes to rate, the models to describe, the latest snapshot.

Arena's votes are read only through ``arena.selectors.votes_for_rating`` (``rated_votes``:
with repeated visitors' prompts capped at ``RATINGS_DUPLICATE_PROMPT_CAP``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.db.models import Count, Max, QuerySet

from answer_style import CONV_METADATA_KEYS
from arena.models import ArenaModel, Battle
from arena.selectors import SourceCap, votes_for_rating
from ratings.engine import ModelRatingDict, RatingResultDict
from ratings.models import LeaderboardSnapshot
from ratings.payload import CategoryEntry, ModelMeta, ProvisionalEntry, SnapshotPayload

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa

    BoolArray = npt.NDArray[np.bool_]
    IntArray = npt.NDArray[np.int64]

# pandas, numpy and pyarrow are imported by the functions that read votes for a fit (a Celery
# worker's, or a command's), so the web worker that shows the leaderboard does not load them.

logger = logging.getLogger(__name__)

STYLE_OPTIONS = ("on", "off")
DEFAULT_CATEGORY = "overall"

#: A provisional model's reason, in words (``ratings.payload.SnapshotReason``).
PROVISIONAL_REASON_TEXT = {
    "no_losses": "No rated model has beaten or tied it yet, directly or through others, so its "
    "rating has no upper bound.",
    "no_wins": "It has not beaten or tied a rated model yet, directly or through others, so its "
    "rating has no lower bound.",
    "not_connected": "It has not met the rated models, directly or through others, so its rating "
    "cannot be put on their scale. Mixed battles fix that: while a live model is not established, "
    "part of the pool battles (ARENA_BRIDGE_SHARE) set its live answer to a pool prompt against "
    "a rated model's stored answer, and a win and a loss (or a tie) there connect it.",
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


def source_cap() -> SourceCap:
    """Each source's bound on a model's rated votes, from the settings."""
    return SourceCap(
        min_votes=settings.RATINGS_SOURCE_MIN_VOTES, share=settings.RATINGS_SOURCE_MAX_SHARE
    )


def rated_votes() -> QuerySet[Any, Any]:
    """The votes a refit rates: ``votes_for_rating`` with repeated visitors' prompts capped at
    ``RATINGS_DUPLICATE_PROMPT_CAP`` votes each and each source's votes on a model bounded
    (``source_cap``), the same for both refit paths (the caps are windows in the query, so the
    in-memory read and the spill's COPY leave out the same votes)."""
    return votes_for_rating(
        duplicate_cap=settings.RATINGS_DUPLICATE_PROMPT_CAP, source_cap=source_cap()
    )


def rated_votes_by_source() -> dict[str, int]:
    """The rated votes by their battle's source (pool, live, mixed, import), in that order."""
    counts = dict(rated_votes().order_by().values_list("battle__source").annotate(n=Count("id")))
    order = {value: i for i, value in enumerate(Battle.Source.values)}
    return {k: int(counts[k]) for k in sorted(counts, key=lambda k: order.get(k, len(order)))}


def rating_votes_mark() -> tuple[int, int]:
    """The votes' high-water mark (largest id, 0 when none) and their count."""
    totals = rated_votes().aggregate(high=Max("id"), n=Count("id"))
    return int(totals["high"] or 0), int(totals["n"])


def rating_battles() -> pd.DataFrame:
    """The rated votes as a battle table in vote-id order, one row per vote."""
    return _battles_frame(list(rated_votes().values_list(*BATTLE_COLUMNS)))


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


#: The style counts' parts as the fast spill reads them, one column each: ``(key, part)``,
#: part None for a key that is an integer itself.
_STYLE_PARTS = tuple(
    (key, part) for key, parts in CONV_METADATA_KEYS.items() for part in (parts or (None,))
)
_PART_COLUMNS = tuple(f"{key}.{part}" if part else key for key, part in _STYLE_PARTS)
_VOTE_COLUMNS = ("vote_id", *_SPILL_TEXT, "turns", "prompt_chars", "prompt_has_code")


class _NotPlain(Exception):
    """A vote's style counts are not all plain integers: the spill is read again exactly."""


def _spill_sql(*, exact: bool) -> tuple[str, list[Any], tuple[str, ...]]:
    """``COPY (...) TO STDOUT`` in CSV of the rated votes in vote-id order, its parameters and
    the names of its columns.

    The votes are ``rating_battles``' query (``rated_votes``) as a subquery, so the same votes are excluded and the columns mean the same. The style counts
    come as one jsonb value per part (``#>``: a number's text is the integer itself, anything
    else is quoted or ``null``; a missing part is empty), or, ``exact``, as the JSON text.
    """
    query = rated_votes().values_list(*BATTLE_COLUMNS).query
    # The SELECT's column order (ValuesListIterable reorders rows into BATTLE_COLUMNS' order).
    names = [*query.extra_select, *query.values_select, *query.annotation_select]
    inner, params = query.sql_with_params()
    aliases = ", ".join(f'"{BATTLE_COLUMNS[name]}"' for name in names)
    select = [
        {
            "prompt_category": "COALESCE(v.prompt_category, '')",
            "language": "COALESCE(v.language, '')",
        }.get(column, f"v.{column}")
        for column in _VOTE_COLUMNS
    ]
    columns: tuple[str, ...]
    if exact:
        select.append("v.conv_metadata::text")
        columns = (*_VOTE_COLUMNS, "conv_metadata")
    else:
        # Keys and parts are the constants of answer_style.schema (no quote in them).
        select += [
            f"v.conv_metadata #> '{{{key}}}'"
            if part is None
            else f"v.conv_metadata #> '{{{key},\"{part}\"}}'"
            for key, part in _STYLE_PARTS
        ]
        columns = (*_VOTE_COLUMNS, *_PART_COLUMNS)
    # Only Django's compiled SQL and this module's constants are interpolated; the values stay
    # in ``params``.
    body = f"SELECT {', '.join(select)} FROM ({inner}) AS v({aliases}) ORDER BY v.vote_id"  # noqa: S608
    sql = f"COPY ({body}) TO STDOUT WITH (FORMAT csv)"
    return sql, list(params), columns


# Parts beyond this size could overflow int64 once summed: such votes take the exact path.
_PART_LIMIT = 2**59


def _plain_counts(table: pa.Table) -> tuple[BoolArray, dict[str, IntArray]]:
    """``style_complete`` and the flat counts from the parts' columns (int64, null where the
    part is missing); ``_NotPlain`` unless every vote has all its parts or none of them."""
    import numpy as np

    parts = {name: table.column(name).combine_chunks() for name in _PART_COLUMNS}
    present = [np.asarray(column.is_valid()) for column in parts.values()]
    complete = np.logical_and.reduce(present)
    if (np.logical_or.reduce(present) & ~complete).any():
        raise _NotPlain("a vote has some style counts and not others")
    counts: dict[str, IntArray] = {
        key: np.zeros(len(complete), np.int64) for key in CONV_METADATA_KEYS
    }
    for (key, _), column in zip(_STYLE_PARTS, parts.values(), strict=True):
        values = column.fill_null(0).to_numpy()
        if len(values) and int(np.abs(values).max()) >= _PART_LIMIT:
            raise _NotPlain("a style count is too large to sum in int64")
        counts[key] += values
    return complete, counts


def _exact_counts(texts: list[str]) -> tuple[BoolArray, dict[str, IntArray]]:
    """``style_complete`` and the flat counts of JSON ``texts``, decoded as the ORM does and
    flattened by ``flatten_conv_metadata`` (which names a bad row by its place in the batch)."""
    import json

    import numpy as np
    import pandas as pd

    from ratings.engine import flatten_conv_metadata

    metas = pd.Series([json.loads(text) for text in texts], dtype=object)
    complete = metas.map(style_complete).astype(bool).to_numpy()
    counts = {c: np.zeros(len(texts), dtype=np.int64) for c in SPILL_STYLE_COLUMNS}
    if complete.any():
        flat = flatten_conv_metadata(pd.DataFrame({"conv_metadata": metas})[complete])
        for column in SPILL_STYLE_COLUMNS:
            counts[column][complete] = flat[column].to_numpy(dtype=np.int64)
    return complete, counts


def _spill_batch(data: bytes, schema: pa.Schema, columns: tuple[str, ...]) -> pa.RecordBatch:
    """One batch of the COPY's CSV rows (``columns``) in the spill's schema."""
    import pyarrow as pa
    import pyarrow.csv as csv

    exact = "conv_metadata" in columns
    types = {f.name: f.type for f in schema if f.name in columns}
    types.update({c: pa.string() for c in _SPILL_TEXT})
    types.update({c: pa.int64() for c in _PART_COLUMNS})
    types["conv_metadata"] = pa.string()
    try:
        table = csv.read_csv(
            pa.py_buffer(data),
            read_options=csv.ReadOptions(column_names=list(columns), use_threads=False),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                column_types={c: types[c] for c in columns},
                # Only an empty field is null (a missing part): a JSON null is text here.
                null_values=[""],
                quoted_strings_can_be_null=False,
                strings_can_be_null=False,
                true_values=["t"],
                false_values=["f"],
            ),
        )
    except pa.ArrowInvalid as exc:
        if exact:
            raise
        raise _NotPlain(f"a style count is not a plain integer ({exc})") from exc
    if exact:
        complete, counts = _exact_counts(table.column("conv_metadata").to_pylist())
    else:
        complete, counts = _plain_counts(table)
    arrays: dict[str, pa.Array] = {c: table.column(c).combine_chunks() for c in _VOTE_COLUMNS}
    arrays[STYLE_COMPLETE_COLUMN] = pa.array(complete, type=pa.bool_())
    arrays.update({c: pa.array(v, type=pa.int64()) for c, v in counts.items()})
    return pa.RecordBatch.from_arrays(
        [
            arrays[f.name].dictionary_encode() if pa.types.is_dictionary(f.type) else arrays[f.name]
            for f in schema
        ],
        schema=schema,
    )


def _spill_batches(*, batch_rows: int, exact: bool) -> Iterator[pa.RecordBatch]:
    """The rated votes in the spill's schema, ``batch_rows`` at a time, from one ``COPY``.

    PostgreSQL sends a COPY's rows one message each as it produces them, so at most one batch
    of CSV text is held here whatever the number of votes. The connection is busy with the
    COPY until the last row is read: nothing else may use it meanwhile. A ``_NotPlain`` batch
    ends the iteration after the rest of the rows are read (not cancelled: a cancel would
    abort the caller's transaction).
    """
    from django.db import connection

    schema = _spill_schema()
    sql, params, columns = _spill_sql(exact=exact)
    failed: _NotPlain | None = None
    with connection.cursor() as cursor, cursor.cursor.copy(sql, params) as copy:
        rows: list[bytes] = []
        for row in copy:
            rows.append(bytes(row))
            if len(rows) == batch_rows:
                try:
                    batch = _spill_batch(b"".join(rows), schema, columns)
                except _NotPlain as exc:
                    failed = exc
                    break
                rows.clear()
                yield batch
        if failed is not None:
            for _ in copy:
                pass
            raise failed
        if rows:
            yield _spill_batch(b"".join(rows), schema, columns)


@dataclass(frozen=True)
class BattleSpill:
    """What ``rating_battles_spill`` wrote: votes, Parquet row groups, largest vote id."""

    rows: int
    row_groups: int
    high_water: int
    exact: bool = False  # whether the votes were read again with their style counts as JSON


def rating_battles_spill(
    path: Path,
    *,
    batch_rows: int,
    observe: Callable[[pa.RecordBatch], None] | None = None,
    restart: Callable[[], None] | None = None,
) -> BattleSpill:
    """Write the rated votes to the Parquet file ``path``, one row group per ``batch_rows`` votes.

    The votes are ``rating_battles()``' in the same order, read by one ``COPY ... TO STDOUT``
    in CSV that PostgreSQL sends with each style count's part as its own column, so no row
    becomes Python objects. A vote whose counts are not all plain integers (or not all
    missing) would read differently that way: the spill is then written again from a second
    COPY that sends the counts as JSON, decoded and flattened as ``rating_battles`` would be
    (``restart`` is called first, so ``observe`` counts each vote once).

    Columns: ``vote_id``; ``model_a``, ``model_b``, ``winner``, ``prompt_category`` and
    ``language`` dictionary-encoded (``""`` where the prompt has none); ``turns``,
    ``prompt_chars``, ``prompt_has_code`` (what the leaderboard's categories read);
    ``style_complete`` and the flat style counts of ``answer_style.CONV_METADATA_KEYS`` (zero
    where ``style_complete`` is false), which ``ratings.engine.read_battles`` accepts.
    ``observe`` sees each written batch before the next one is read (memory stays at about
    one batch); it must not use the database connection, which the COPY holds.
    """
    from django.db import NotSupportedError, connection

    if connection.vendor != "postgresql":
        raise NotSupportedError(
            f"the spill reads votes with PostgreSQL's COPY, not {connection.vendor}'s"
        )
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    if observe is not None and restart is None:
        raise ValueError("observe needs restart: a spill read again shows its batches again")
    try:
        return _spill(path, batch_rows=batch_rows, observe=observe, exact=False)
    except _NotPlain as exc:
        logger.warning("ratings: spill read again with JSON style counts: %s", exc)
        if restart is not None:
            restart()
        return _spill(path, batch_rows=batch_rows, observe=observe, exact=True)


def _spill(
    path: Path,
    *,
    batch_rows: int,
    observe: Callable[[pa.RecordBatch], None] | None,
    exact: bool,
) -> BattleSpill:
    import pyarrow.parquet as pq

    rows = groups = high = 0
    with pq.ParquetWriter(path, _spill_schema()) as writer:
        for batch in _spill_batches(batch_rows=batch_rows, exact=exact):
            writer.write_batch(batch, row_group_size=batch.num_rows)
            if observe is not None:
                observe(batch)
            rows += batch.num_rows
            groups += 1
            high = max(high, int(batch.column(0)[-1].as_py()))
    return BattleSpill(rows=rows, row_groups=groups, high_water=high, exact=exact)


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
