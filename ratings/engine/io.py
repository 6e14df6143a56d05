"""Reading battle files in the public arena schema: JSON, JSONL, CSV or Parquet.

Only the columns the engine needs are read. Style counts come either as flat integer columns
(``data.CONV_METADATA_KEYS``) or as a ``conv_metadata`` object per row; in Parquet the object is
a struct and is flattened column-wise by Arrow, without a Python loop over rows.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from .data import CONV_METADATA_KEYS, BattleTable, FloatArray, IntArray, flatten_conv_metadata
from .errors import EngineError

if TYPE_CHECKING:
    import pandas as pd

REQUIRED = ("model_a", "model_b", "winner")
FLAT_COLUMNS = tuple(CONV_METADATA_KEYS)


def has_style_counts(battles: pd.DataFrame | BattleTable) -> bool:
    present = set(battles.columns)
    return all(column in present for column in FLAT_COLUMNS)


def _require(columns: list[str] | pd.Index) -> None:
    for column in REQUIRED:
        if column not in columns:
            raise EngineError(f"missing column {column!r}", column=column)


_NUMPY_TYPES = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def _as_numpy(values: pa.Array) -> NDArray[Any]:
    """A null-free primitive Arrow array as a numpy view of its data buffer.

    ``Array.to_numpy`` imports pandas (0.4 s) on first use; the buffer view does not.
    """
    dtype = _NUMPY_TYPES.get(values.type)
    if dtype is None or values.null_count:
        return np.asarray(values.to_numpy(zero_copy_only=False))
    itemsize = np.dtype(dtype).itemsize
    data = values.buffers()[1]
    return np.frombuffer(data, dtype=dtype, count=len(values), offset=values.offset * itemsize)


def _numbers(values: pa.Array, column: str, offset: int) -> FloatArray:
    """An Arrow integer array as float64; a null names its row."""
    out = np.asarray(_as_numpy(values), dtype=np.float64)
    if values.null_count:
        row = offset + int(np.flatnonzero(np.isnan(out))[0])
        raise EngineError(f"row {row}: {column} is missing", column=column, row=row)
    return out


def _flatten_struct(column: pa.StructArray, offset: int) -> dict[str, FloatArray]:
    """The flat counts of a struct ``conv_metadata`` column (rows numbered from ``offset``)."""
    out: dict[str, FloatArray] = {}
    for key, parts in CONV_METADATA_KEYS.items():
        name = f"conv_metadata.{key}"
        try:
            field = column.field(key)
            if parts is None:
                out[key] = _numbers(field, name, offset)
            else:
                out[key] = sum(
                    (_numbers(field.field(part), f"{name}.{part}", offset) for part in parts),
                    start=np.zeros(len(column)),
                )
        except (KeyError, AttributeError, TypeError, pa.ArrowInvalid) as exc:
            raise EngineError(f"{name} is missing or not a count", column=name) from exc
    return out


def _dictionary_codes(column: pa.ChunkedArray, name: str) -> tuple[IntArray, list[str]]:
    """Codes (-1 for null) and names of a string column, through Arrow's dictionary."""
    if not pa.types.is_dictionary(column.type):
        import pyarrow.compute as pc  # only here: importing it costs 0.1 s

        column = pc.dictionary_encode(column)
    combined = column.unify_dictionaries().combine_chunks()
    indices = combined.indices
    if indices.null_count:
        codes = np.asarray(_as_numpy(indices), dtype=np.float64)
        row = int(np.flatnonzero(np.isnan(codes))[0]) + 1
        raise EngineError(f"row {row}: {name} is empty", column=name, row=row)
    names = [str(value) for value in combined.dictionary.to_pylist()]
    return np.asarray(_as_numpy(indices), dtype=np.int64), names


def _read_parquet(path: Path) -> pd.DataFrame | BattleTable:
    # ParquetFile rather than pq.read_table, which imports pyarrow.dataset (0.5 s); the
    # result is a BattleTable of plain arrays, so pandas is not imported either.
    parquet = pq.ParquetFile(path, read_dictionary=list(REQUIRED))
    names = parquet.schema_arrow.names
    _require(names)
    flat = all(c in names for c in FLAT_COLUMNS)
    columns = [*REQUIRED, *FLAT_COLUMNS] if flat else list(REQUIRED)
    table = parquet.read(columns=columns)
    if "conv_metadata" in names and not flat:
        if not pa.types.is_struct(parquet.schema_arrow.field("conv_metadata").type):
            import pandas as pd

            meta = parquet.read(columns=["conv_metadata"]).to_pandas()  # JSON text
            frame = table.to_pandas().assign(conv_metadata=meta["conv_metadata"])
            frame.index = pd.RangeIndex(1, len(frame) + 1)
            return flatten_conv_metadata(frame)
    strings = {c: _dictionary_codes(table.column(c), c) for c in REQUIRED}
    numbers: dict[str, FloatArray] = {}
    if flat:
        for c in FLAT_COLUMNS:
            numbers[c] = _numbers(table.column(c).combine_chunks(), c, 1)
    elif "conv_metadata" in names:
        # Batches keep the ~20 nested count columns from being held in memory at once.
        numbers = {key: np.empty(table.num_rows, dtype=np.float64) for key in FLAT_COLUMNS}
        offset = 0
        for batch in parquet.iter_batches(batch_size=1 << 17, columns=["conv_metadata"]):
            for key, values in _flatten_struct(batch.column(0), offset + 1).items():
                numbers[key][offset : offset + len(values)] = values
            offset += batch.num_rows
    return BattleTable(strings, numbers, table.num_rows, first_label=1)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _bad_json_line(data: bytes) -> tuple[int, str] | None:
    """The first line (1-based) of JSONL ``data`` that is not a JSON object, and why."""
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            return number, f"not valid JSON: {exc.msg} at column {exc.colno}"
        except ValueError as exc:  # UnicodeDecodeError
            return number, f"not valid JSON: {_first_line(exc)}"
        if not isinstance(value, dict):
            return number, f"a JSON {type(value).__name__}, not an object"
    return None


def _read_jsonl(source: Path | None, name: str) -> pd.DataFrame:
    import pandas as pd

    data = sys.stdin.buffer.read() if source is None else source.read_bytes()
    try:
        return pd.read_json(io.BytesIO(data), lines=True, dtype=False)
    except ValueError as exc:
        bad = _bad_json_line(data)
        if bad is None:
            raise EngineError(f"{name}: not JSON Lines ({_first_line(exc)})") from exc
        raise EngineError(f"{name}: line {bad[0]}: {bad[1]}") from exc


def read_battles(path: str | Path) -> pd.DataFrame | BattleTable:
    """Battles from ``path``; the format follows the suffix (.json, .jsonl, .csv, .parquet).

    ``-`` reads JSON Lines from standard input (what ``export_votes --format arena`` writes).
    Returns ``model_a``, ``model_b``, ``winner`` and, when the file has them, the flat style
    count columns, as a DataFrame (JSON, CSV) or a ``BattleTable`` (Parquet); ``rate`` takes
    either. Rows are labelled 1, 2, ... in file order (the first battle is row 1; in JSON
    Lines without blank lines row N is line N), and error messages quote these labels. A file
    that cannot be parsed raises ``EngineError`` in one line (JSON Lines: the first bad line).
    """
    if str(path) == "-":
        return _prepare(_read_jsonl(None, "standard input"))
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.exists():
        raise EngineError(f"{path}: no such file")
    if suffix not in (".parquet", ".pq", ".jsonl", ".json", ".csv"):
        raise EngineError(f"{path}: unknown format {suffix!r} (use .json, .jsonl, .csv, .parquet)")
    try:
        if suffix in (".parquet", ".pq"):
            return _read_parquet(path)
        import pandas as pd

        if suffix == ".jsonl":
            df = _read_jsonl(path, str(path))
        elif suffix == ".json":
            df = pd.read_json(path, dtype=False)
        else:
            df = pd.read_csv(path, dtype={"model_a": str, "model_b": str, "winner": str})
    except EngineError:
        raise
    except (ValueError, OSError, pa.ArrowException) as exc:
        # The file's own fault (not valid JSON, CSV or Parquet, unreadable): one line.
        raise EngineError(f"{path}: cannot read it ({_first_line(exc)})") from exc
    return _prepare(df)


def _prepare(df: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    _require(df.columns)
    df = df.reset_index(drop=True)
    df.index = pd.RangeIndex(1, len(df) + 1)
    if not has_style_counts(df) and "conv_metadata" in df.columns:
        df = flatten_conv_metadata(df[[*REQUIRED, "conv_metadata"]])
    keep = [*REQUIRED, *(c for c in FLAT_COLUMNS if c in df.columns)]
    return df[keep]
