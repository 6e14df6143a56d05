"""Writing rows: JSONL a line at a time, Parquet a row group at a time under a fixed Arrow
schema per format, and a dataset folder (the data file and its card) moved into place whole."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import orjson
from django.core.management.base import OutputWrapper

from arena.exports.card import dataset_card
from arena.exports.formats import ExportRow, arrow_schema
from arena.exports.records import ExportStats, ImageRef

if TYPE_CHECKING:
    import pyarrow as pa  # imported where used: Django's start-up does not pay for it


def _json_default(value: object) -> object:
    """What orjson cannot write itself: a prompt's image, as a data URL with what it is."""
    if isinstance(value, ImageRef):
        return value.as_json()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def jsonl_line(row: ExportRow) -> str:
    # orjson: a tenth of json.dumps's time on rows of long answers (UTF-8, not \u escapes).
    # ``default`` is called only for an image (a dataclass, which orjson would otherwise write
    # field by field, its storage name included), so text rows pay nothing for it.
    options = orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATACLASS
    return orjson.dumps(row, default=_json_default, option=options).decode()


def write_jsonl(rows: Iterable[ExportRow | bytes], out: IO[str] | OutputWrapper) -> None:
    """The rows, a line each; a row given as bytes is its line already (``pgcopy``)."""
    for row in rows:
        out.write(row.decode() if isinstance(row, bytes) else jsonl_line(row))


def write_jsonl_bytes(rows: Iterable[ExportRow | bytes], out: IO[bytes]) -> None:
    """The rows, a line each, to a binary file, a megabyte of lines per write."""
    options = orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATACLASS
    pending: list[bytes] = []
    size = 0
    for row in rows:
        line = (
            row
            if isinstance(row, bytes)
            else orjson.dumps(row, default=_json_default, option=options)
        )
        pending.append(line)
        size += len(line)
        if size >= 1 << 20:
            out.write(b"".join(pending))
            pending, size = [], 0
    out.write(b"".join(pending))


#: Rows per Parquet row group at most.
ROW_GROUP_SIZE = 50_000
#: JSON bytes of text rows (a row group's worth) that a Parquet export holds at once: Arrow's
#: JSON reader parses them under the format's schema, and they are written as one row group.
TEXT_GROUP_BYTES = 8 * 1024 * 1024
#: Image rows converted to Arrow at a time (their bytes are read only then).
IMAGE_ROWS_PER_BATCH = 20
#: Image bytes a Parquet row group holds at most: a row group of image rows is closed at this
#: size, however few rows it has (an image may be up to ``ARENA_IMAGE_MAX_BYTES``).
IMAGE_GROUP_BYTES = 64 * 1024 * 1024
# Columns worth a Parquet dictionary: a few distinct values each. Answers and prompts are not
# (a dictionary of long texts that hardly repeat costs memory and saves nothing).
_DICTIONARY_COLUMNS = (
    "model_a",
    "model_b",
    "winner",
    "judge",
    "language",
    "category",
    "source",
)


def write_parquet(
    rows: Iterable[ExportRow | bytes],
    path: str | Path,
    fmt: str,
    *,
    row_group_size: int = ROW_GROUP_SIZE,
    group_bytes: int = TEXT_GROUP_BYTES,
) -> None:
    """The rows in one Parquet file under ``arrow_schema(fmt)``, a row group at a time.

    A row without images is written as its JSON line (orjson) and a row group's lines are
    parsed at once by Arrow's JSON reader under the schema: a C++ parse of the whole batch,
    several times faster than converting Python values row by row. A row with images (their
    bytes) is converted from Python values, a few at a time. Rows keep their order.
    """
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    schema = arrow_schema(fmt)
    dictionary = [name for name in _DICTIONARY_COLUMNS if name in schema.names]
    parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    lines: list[bytes] = []
    size = 0
    pictured: list[dict[str, Any]] = []
    image_bytes = 0
    # The system allocator for the export: mimalloc (pyarrow's default) kept 15-30 MB more
    # resident through a long write in bench/export.py, for no gain in speed.
    pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        with pq.ParquetWriter(str(path), schema, use_dictionary=dictionary) as writer:

            def write_lines() -> None:
                nonlocal lines, size
                if not lines:
                    return
                data = b"".join(lines)
                lines, size = [], 0
                read = pj.ReadOptions(block_size=len(data) + 1, use_threads=True)
                table = pj.read_json(pa.BufferReader(data), read_options=read, parse_options=parse)
                del data
                writer.write_table(table.cast(schema), row_group_size=max(1, len(table)))

            def write_images(batches: list[pa.RecordBatch]) -> None:
                table = pa.Table.from_batches(batches, schema=schema)
                writer.write_table(table, row_group_size=row_group_size)

            image_batches: list[pa.RecordBatch] = []
            for row in rows:
                if isinstance(row, bytes):  # a row's JSON line already (``pgcopy``)
                    plain: dict[str, Any] = {}
                    line = row
                else:
                    plain = cast(dict[str, Any], row)
                    line = b""
                if plain.get("images"):
                    write_lines()  # the rows before it first
                    pictured.append(_arrow_images(plain))
                    image_bytes += sum(len(i["bytes"]) for i in pictured[-1]["images"])
                    if len(pictured) >= min(IMAGE_ROWS_PER_BATCH, row_group_size):
                        image_batches.append(pa.RecordBatch.from_pylist(pictured, schema=schema))
                        pictured = []
                        rows_held = sum(len(batch) for batch in image_batches)
                        if image_bytes >= IMAGE_GROUP_BYTES or rows_held >= row_group_size:
                            write_images(image_batches)
                            image_batches, image_bytes = [], 0
                    continue
                if pictured or image_batches:
                    if pictured:
                        image_batches.append(pa.RecordBatch.from_pylist(pictured, schema=schema))
                        pictured = []
                    write_images(image_batches)
                    image_batches, image_bytes = [], 0
                if not line:
                    line = orjson.dumps(plain, option=orjson.OPT_APPEND_NEWLINE)
                lines.append(line)
                size += len(line)
                if size >= group_bytes or len(lines) >= row_group_size:
                    write_lines()
            write_lines()
            if pictured:
                image_batches.append(pa.RecordBatch.from_pylist(pictured, schema=schema))
            if image_batches:
                write_images(image_batches)
    finally:
        pa.set_memory_pool(pool)


def _arrow_images(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "images": [image.as_arrow() for image in row["images"]]}


#: The licence of an export folder's card unless the command is told another: the arena's
#: demo votes are CC-BY-4.0 (MT-bench human judgments), and visitors agree that their votes
#: may be published as an open data set.
VOTES_LICENSE = "cc-by-4.0"


def write_dataset(
    rows: Iterable[ExportRow | bytes],
    folder: Path,
    fmt: str,
    *,
    stats: ExportStats,
    filters: Mapping[str, Any],
    parquet: bool = False,
    license: str = VOTES_LICENSE,
) -> Path:
    """The rows as ``folder/arena-votes-<fmt>.jsonl`` (or ``.parquet``) and its dataset card
    ``folder/README.md``; returns the data file's path. Both are written aside and moved into
    place, the card last, so a failed export leaves neither half-written."""
    data = folder / f"arena-votes-{fmt}.{'parquet' if parquet else 'jsonl'}"
    card = folder / "README.md"
    partial_data = data.with_name(data.name + ".partial")
    partial_card = card.with_name(card.name + ".partial")
    try:
        if parquet:
            write_parquet(rows, partial_data, fmt)
        else:
            with partial_data.open("wb") as handle:
                write_jsonl_bytes(rows, handle)
        partial_card.write_text(
            dataset_card(fmt, data.name, stats, filters, license=license, jsonl=not parquet),
            encoding="utf-8",
        )
        partial_data.replace(data)
        partial_card.replace(card)
    finally:
        partial_data.unlink(missing_ok=True)
        partial_card.unlink(missing_ok=True)
    return data
