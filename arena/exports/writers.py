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
from arena.exports.records import ExportStats, ImageRef, chunks

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


def write_jsonl(rows: Iterable[ExportRow], out: IO[str] | OutputWrapper) -> None:
    for row in rows:
        out.write(jsonl_line(row))


#: Rows per Parquet row group: the most rows an export holds in memory at once.
ROW_GROUP_SIZE = 2000
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
    rows: Iterable[ExportRow], path: str | Path, fmt: str, *, row_group_size: int = ROW_GROUP_SIZE
) -> None:
    """The rows in one Parquet file under ``arrow_schema(fmt)``, a row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(fmt)
    dictionary = [name for name in _DICTIONARY_COLUMNS if name in schema.names]
    images = "images" in schema.names
    # Rows are converted to Arrow a few hundred at a time (the conversion's temporaries cost
    # several times the batch), and a row group is written from the batches it collected.
    # Image rows go a few at a time, their bytes read only then.
    step = max(1, min(row_group_size, 20 if images else 500))
    batches: list[pa.RecordBatch] = []
    image_bytes = 0
    # The system allocator for the export: mimalloc (pyarrow's default) kept 15-30 MB more
    # resident through a long write in bench/export.py, for no gain in speed.
    pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        with pq.ParquetWriter(str(path), schema, use_dictionary=dictionary) as writer:
            for chunk in chunks(rows, step):
                plain = cast(list[dict[str, Any]], chunk)
                if images:
                    plain = [_arrow_images(row) for row in plain]
                    image_bytes += sum(len(i["bytes"]) for row in plain for i in row["images"])
                batches.append(pa.RecordBatch.from_pylist(plain, schema=schema))
                full = sum(len(batch) for batch in batches) >= row_group_size
                if full or image_bytes >= IMAGE_GROUP_BYTES:
                    table = pa.Table.from_batches(batches)
                    writer.write_table(table, row_group_size=row_group_size)
                    batches, image_bytes = [], 0
            if batches:
                writer.write_table(pa.Table.from_batches(batches), row_group_size=row_group_size)
    finally:
        pa.set_memory_pool(pool)


def _arrow_images(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "images": [image.as_arrow() for image in row["images"]]}


#: The licence of an export folder's card unless the command is told another: the arena's
#: demo votes are CC-BY-4.0 (MT-bench human judgments), and visitors agree that their votes
#: may be published as an open data set.
VOTES_LICENSE = "cc-by-4.0"


def write_dataset(
    rows: Iterable[ExportRow],
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
            with partial_data.open("w", encoding="utf-8") as handle:
                write_jsonl(rows, handle)
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
