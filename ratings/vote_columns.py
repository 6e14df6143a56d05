"""Votes as typed columns: the whole-table reads of the trust computations (``ratings.voters``,
``ratings.cohorts``), with no Python object per vote, and the style counts as a ``COPY`` reads
them (shared with ``ratings.vote_sources``' Parquet path).

The anomaly tests and the burst test read every vote at each run. As ``values()`` rows, 1M votes
took 47 s and GBs (a dict and a decoded JSON object per vote); here a queryset of
``arena.selectors`` is read into arrays, in the order of the field ``order``:

- on PostgreSQL, by one ``COPY (...) TO STDOUT`` in CSV, ``BATCH_ROWS`` rows parsed at a time
  by pyarrow. The style counts come one column per part (``style_part_sql``: a number's text
  is the integer itself, a missing part is empty), a moment as integer microseconds since the
  Unix epoch computed by the database (exact, as Python's ``datetime`` arithmetic is). A vote
  whose counts are not all plain integers (or not all missing) would read differently that
  way (``StyleNotPlain``): the votes are then read again with the counts as JSON, decoded and
  flattened as the ORM does;
- elsewhere (SQLite, the local default), by ``values_list``, into the same arrays.

Kinds of field: ``int`` (int64), ``bool``, ``text`` (``Texts``: codes into the sorted distinct
values; NULL reads as ""), ``micros`` (a datetime as int64 microseconds since 1970-01-01 UTC) and
``style`` (at most one: ``StyleCounts``, the flat counts of ``CONV_METADATA_KEYS`` and which
votes have them all).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd
from django.db.models import QuerySet

from answer_style import CONV_METADATA_KEYS
from ratings import engine

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
T = TypeVar("T")
Kind = Literal["int", "bool", "text", "micros", "style"]

#: Rows of COPY text parsed at a time (about 20-30 MB of CSV for the trust computations' reads).
BATCH_ROWS = 100_000
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- The style counts as a COPY sends them ----------------------------------------------------

#: The style counts' parts, one column each: ``(key, part)``, part None for a key that is an
#: integer itself.
STYLE_PARTS = tuple(
    (key, part) for key, parts in CONV_METADATA_KEYS.items() for part in (parts or (None,))
)
PART_COLUMNS = tuple(f"{key}.{part}" if part else key for key, part in STYLE_PARTS)
# Parts beyond this size could overflow int64 once summed: such votes take the exact path.
_PART_LIMIT = 2**59


class StyleNotPlain(Exception):
    """A vote's style counts are not all plain integers: the votes are read again exactly."""


def style_part_sql(column: str) -> list[str]:
    """The SQL of each part of the jsonb ``column`` (``PART_COLUMNS``' order), as jsonb: a
    number's text is the integer itself, anything else is quoted or ``null``, a missing part
    NULL (empty in CSV)."""
    # Keys and parts are the constants of answer_style.schema (no quote in them).
    return [
        f"{column} #> '{{{key}}}'" if part is None else f"{column} #> '{{{key},\"{part}\"}}'"
        for key, part in STYLE_PARTS
    ]


def style_complete(meta: Any) -> bool:
    """Whether a vote's ``conv_metadata`` holds every style count (style control uses it)."""
    return isinstance(meta, dict) and all(k in meta for k in CONV_METADATA_KEYS)


def style_counts_plain(table: pa.Table) -> tuple[BoolArray, dict[str, IntArray]]:
    """``style_complete`` and the flat counts from the parts' columns (``PART_COLUMNS``: int64,
    null where the part is missing); ``StyleNotPlain`` unless every vote has all its parts or
    none of them."""
    parts = {name: table.column(name).combine_chunks() for name in PART_COLUMNS}
    present = [np.asarray(column.is_valid()) for column in parts.values()]
    complete = np.logical_and.reduce(present)
    if (np.logical_or.reduce(present) & ~complete).any():
        raise StyleNotPlain("a vote has some style counts and not others")
    counts: dict[str, IntArray] = {
        key: np.zeros(len(complete), np.int64) for key in CONV_METADATA_KEYS
    }
    for (key, _), column in zip(STYLE_PARTS, parts.values(), strict=True):
        values = column.fill_null(0).to_numpy()
        if len(values) and int(np.abs(values).max()) >= _PART_LIMIT:
            raise StyleNotPlain("a style count is too large to sum in int64")
        counts[key] += values
    return complete, counts


def style_counts_of(metas: Sequence[Any]) -> tuple[BoolArray, dict[str, IntArray]]:
    """``style_complete`` and the flat counts of decoded ``conv_metadata`` objects, flattened by
    ``flatten_conv_metadata`` (which names a bad row by its place in ``metas``); zeros where a
    vote lacks them."""
    series = pd.Series(list(metas), dtype=object)
    complete = series.map(style_complete).astype(bool).to_numpy()
    counts = {c: np.zeros(len(series), dtype=np.int64) for c in CONV_METADATA_KEYS}
    if complete.any():
        flat = engine.flatten_conv_metadata(pd.DataFrame({"conv_metadata": series})[complete])
        for column in CONV_METADATA_KEYS:
            counts[column][complete] = flat[column].to_numpy(dtype=np.int64)
    return complete, counts


# --- Typed columns of a queryset --------------------------------------------------------------


@dataclass(frozen=True)
class Texts:
    """A text column: ``codes`` (one per row) into ``values`` (distinct, sorted as Python sorts
    strings, so that codes compare as the texts do)."""

    codes: IntArray
    values: npt.NDArray[np.object_]

    def categorical(self) -> pd.Categorical:
        return pd.Categorical.from_codes(self.codes, categories=pd.Index(self.values, dtype=object))


def texts_shared(*columns: Texts) -> tuple[list[IntArray], npt.NDArray[np.object_]]:
    """The codes of several text columns over one vocabulary (sorted, distinct)."""
    if not columns:
        return [], np.empty(0, dtype=object)
    vocabulary, inverse = np.unique(
        np.concatenate([c.values for c in columns]), return_inverse=True
    )
    codes, start = [], 0
    for column in columns:
        codes.append(
            np.asarray(inverse[start : start + len(column.values)], np.int64)[column.codes]
        )
        start += len(column.values)
    return codes, np.asarray(vocabulary, dtype=object)


def _texts(values: Sequence[Any]) -> Texts:
    strings = np.array(["" if v is None else str(v) for v in values], dtype=object)
    vocabulary, codes = np.unique(strings, return_inverse=True) if len(strings) else (strings, [])
    return Texts(np.asarray(codes, dtype=np.int64), np.asarray(vocabulary, dtype=object))


@dataclass(frozen=True)
class VoteColumns:
    """The columns read, by field name and kind."""

    n: int
    numbers: dict[str, IntArray]  # ``int`` and ``micros``
    flags: dict[str, BoolArray]
    texts: dict[str, Texts]
    style: tuple[BoolArray, dict[str, IntArray]] | None  # (complete, flat counts)


def vote_columns(
    queryset: QuerySet[Any, Any], fields: Mapping[str, Kind], *, order: str
) -> VoteColumns:
    """The ``fields`` of ``queryset``'s rows (``values_list`` names) as columns, ordered by the
    field ``order`` (see the module's text for how and for the kinds)."""
    from django.db import connection

    if sum(kind == "style" for kind in fields.values()) > 1:
        raise ValueError("at most one style field")
    if connection.vendor != "postgresql":
        return _orm_columns(queryset, fields, order=order)
    try:
        return _copy_columns(queryset, fields, order=order, exact=False)
    except StyleNotPlain as exc:
        logger.warning("ratings: votes read again with JSON style counts: %s", exc)
        return _copy_columns(queryset, fields, order=order, exact=True)


def _orm_columns(
    queryset: QuerySet[Any, Any], fields: Mapping[str, Kind], *, order: str
) -> VoteColumns:
    names = list(fields)
    values: dict[str, list[Any]] = {name: [] for name in names}
    for row in queryset.order_by(order).values_list(*names).iterator(chunk_size=20_000):
        for name, value in zip(names, row, strict=True):
            values[name].append(value)
    numbers: dict[str, IntArray] = {}
    flags: dict[str, BoolArray] = {}
    texts: dict[str, Texts] = {}
    style = None
    unit = timedelta(microseconds=1)
    for name, kind in fields.items():
        column = values[name]
        if kind == "int":
            numbers[name] = np.array(column, dtype=np.int64).reshape(-1)
        elif kind == "micros":
            numbers[name] = np.array([(t - _UNIX_EPOCH) // unit for t in column], dtype=np.int64)
        elif kind == "bool":
            flags[name] = np.array(column, dtype=bool).reshape(-1)
        elif kind == "text":
            texts[name] = _texts(column)
        else:
            style = style_counts_of(column)
    n = len(values[names[0]]) if names else 0
    return VoteColumns(n, numbers, flags, texts, style)


def _copy_sql(
    queryset: QuerySet[Any, Any], fields: Mapping[str, Kind], *, order: str, exact: bool
) -> tuple[str, list[Any], list[tuple[str, pa.DataType]]]:
    """``COPY (...) TO STDOUT`` in CSV of the fields, its parameters and the CSV's columns
    (name, Arrow type). The queryset is a subquery, so its filters and joins stay Django's."""
    import pyarrow as pa

    query = queryset.order_by().values_list(*fields).query
    # The SELECT's column order: values_list's, fields and annotations mixed (``selected``).
    assert query.selected is not None  # noqa: S101
    position = {name: i for i, name in enumerate(query.selected)}
    inner, params = query.sql_with_params()
    aliases = ", ".join(f"c{i}" for i in range(len(position)))
    select: list[str] = []
    columns: list[tuple[str, pa.DataType]] = []
    types = {"int": pa.int64(), "bool": pa.bool_(), "text": pa.dictionary(pa.int32(), pa.string())}
    for name, kind in fields.items():
        column = f"v.c{position[name]}"
        if kind == "micros":
            select.append(f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint")
            columns.append((name, pa.int64()))
        elif kind == "style" and exact:
            select.append(f"{column}::text")
            columns.append((name, pa.string()))
        elif kind == "style":
            select += style_part_sql(column)
            columns += [(part, pa.int64()) for part in PART_COLUMNS]
        else:
            select.append(column)
            columns.append((name, types[kind]))
    # Only Django's compiled SQL and this module's constants are interpolated; the values stay
    # in ``params``.
    body = (
        f"SELECT {', '.join(select)} FROM ({inner}) AS v({aliases}) "  # noqa: S608
        f"ORDER BY v.c{position[order]}"
    )
    return f"COPY ({body}) TO STDOUT WITH (FORMAT csv)", list(params), columns


def copy_parsed(
    sql: str,
    params: list[Any],
    parse: Callable[[bytes], T],
    *,
    batch_rows: int,
    errors: tuple[type[Exception], ...],
) -> Iterator[T]:
    """The COPY's rows, ``batch_rows`` at a time, each batch's text given to ``parse``. The
    connection is busy until the last row is read; a batch whose ``parse`` raises one of
    ``errors`` ends the iteration after the rest of the rows are read (a cancel would abort
    the caller's transaction), then the error is raised."""
    from django.db import connection

    failed: Exception | None = None
    with connection.cursor() as cursor, cursor.cursor.copy(sql, params) as copy:
        rows: list[bytes] = []
        for row in copy:
            rows.append(bytes(row))
            if len(rows) == batch_rows:
                try:
                    batch = parse(b"".join(rows))
                except errors as exc:
                    failed = exc
                    break
                rows.clear()
                yield batch
        if failed is not None:
            for _ in copy:
                pass
            raise failed
        if rows:
            yield parse(b"".join(rows))


def _copy_batches(
    sql: str, params: list[Any], columns: list[tuple[str, pa.DataType]]
) -> Iterator[pa.Table]:
    """The COPY's rows, ``BATCH_ROWS`` at a time, as Arrow tables (``copy_parsed``)."""
    return copy_parsed(
        sql,
        params,
        lambda data: _parse(data, columns),
        batch_rows=BATCH_ROWS,
        errors=(StyleNotPlain, ValueError),
    )


def _parse(data: bytes, columns: list[tuple[str, pa.DataType]]) -> pa.Table:
    import pyarrow as pa
    import pyarrow.csv as csv

    try:
        return csv.read_csv(
            pa.py_buffer(data),
            read_options=csv.ReadOptions(column_names=[c for c, _ in columns], use_threads=False),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                column_types=dict(columns),
                # Only an empty field is null (a missing part): a JSON null is text here, and
                # an empty text is "" (NULL too: the fields read as text are never NULL).
                null_values=[""],
                quoted_strings_can_be_null=False,
                strings_can_be_null=False,
                true_values=["t"],
                false_values=["f"],
            ),
        )
    except pa.ArrowInvalid as exc:
        if any(name in PART_COLUMNS for name, _ in columns):
            raise StyleNotPlain(f"a style count is not a plain integer ({exc})") from exc
        raise


def _copy_columns(
    queryset: QuerySet[Any, Any], fields: Mapping[str, Kind], *, order: str, exact: bool
) -> VoteColumns:
    import json

    sql, params, columns = _copy_sql(queryset, fields, order=order, exact=exact)
    pieces: dict[str, list[Any]] = {name: [] for name, _ in columns}
    n = 0
    style_parts: list[tuple[BoolArray, dict[str, IntArray]]] = []
    style_name = next((name for name, kind in fields.items() if kind == "style"), None)
    for table in _copy_batches(sql, params, columns):
        n += table.num_rows
        for name, kind in fields.items():
            if kind == "style":
                if exact:
                    texts = table.column(name).to_pylist()
                    style_parts.append(style_counts_of([json.loads(t) for t in texts]))
                else:
                    style_parts.append(style_counts_plain(table))
            elif kind == "text":
                pieces[name].append(table.column(name).combine_chunks())
            else:
                pieces[name].append(table.column(name).to_numpy())
    numbers: dict[str, IntArray] = {}
    flags: dict[str, BoolArray] = {}
    texts_out: dict[str, Texts] = {}
    for name, kind in fields.items():
        if kind in ("int", "micros"):
            numbers[name] = np.concatenate([np.empty(0, np.int64), *pieces[name]]).astype(np.int64)
        elif kind == "bool":
            flags[name] = np.concatenate([np.empty(0, bool), *pieces[name]]).astype(bool)
        elif kind == "text":
            texts_out[name] = _texts_merged(pieces[name])
    style = None
    if style_name is not None:
        complete = np.concatenate([np.empty(0, bool), *(c for c, _ in style_parts)])
        counts = {
            key: np.concatenate([np.empty(0, np.int64), *(p[key] for _, p in style_parts)])
            for key in CONV_METADATA_KEYS
        }
        style = (complete, counts)
    return VoteColumns(n, numbers, flags, texts_out, style)


def _texts_merged(chunks: list[pa.DictionaryArray]) -> Texts:
    """One ``Texts`` from the batches' dictionary-encoded columns, in Arrow: the distinct
    values sorted as their UTF-8 bytes sort, which is the order of Python's strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not chunks:
        return Texts(np.empty(0, np.int64), np.empty(0, dtype=object))
    entries = pa.concat_arrays([chunk.dictionary for chunk in chunks]).dictionary_encode()
    order = np.asarray(pc.sort_indices(entries.dictionary), dtype=np.int64)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    entry_rank = rank[np.asarray(entries.indices, dtype=np.int64)]
    codes, start = [], 0
    for chunk in chunks:
        local = entry_rank[start : start + len(chunk.dictionary)]
        codes.append(local[np.asarray(chunk.indices, dtype=np.int64)])
        start += len(chunk.dictionary)
    values = np.array(entries.dictionary.take(pa.array(order)).to_pylist(), dtype=object)
    return Texts(np.concatenate(codes), values)
