"""The streamed fit's first pass (``stream``): a Parquet file, one batch at a time (Arrow decoding
the next batch on a second thread), to model ids, battle counts per (ordered pair, outcome),
per-pair sums of the raw style differences and of their products, and, with style control, the
spill: each battle's pair id, outcome and raw differences appended to a temporary file (37 bytes
a battle) that later passes read instead of Parquet. The file I/O of the streamed fit lives here
and in ``spill``; the estimator's sums in ``stream_sums`` read none."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from queue import Queue
from typing import BinaryIO, Literal, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from .data import (
    CONV_METADATA_KEYS,
    OUTCOMES,
    STYLE_COLUMNS,
    STYLE_ELEMENTS,
    FloatArray,
    IntArray,
    flatten_conv_metadata,
)
from .errors import EngineError
from .io import FLAT_COLUMNS, REQUIRED, _as_numpy, _first_line

K = len(STYLE_ELEMENTS)
#: Index pairs (j, l), j <= l, of the style products summed per pair in the first pass.
_PRODUCTS = [(j, m) for j in range(K) for m in range(j, K)]

Where = Callable[[pa.RecordBatch], NDArray[np.bool_]]


def _style_source(schema: pa.Schema) -> Literal["flat", "struct", "json", "none"]:
    names = schema.names
    if all(c in names for c in FLAT_COLUMNS):
        return "flat"
    if "conv_metadata" in names:
        return "struct" if pa.types.is_struct(schema.field("conv_metadata").type) else "json"
    return "none"


def _batches(
    path: str | os.PathLike[str],
    style_control: bool,
    where: Where | None,
    where_columns: Sequence[str] | None,
    batch_rows: int,
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(first row's 0-based position, batch)`` over the file; unreadable files are one line."""
    source = Path(path)
    if not source.exists():
        raise EngineError(f"{source}: no such file")
    try:
        parquet = pq.ParquetFile(source, read_dictionary=list(REQUIRED))
    except (OSError, pa.ArrowException) as exc:
        raise EngineError(f"{source}: cannot read it ({_first_line(exc)})") from exc
    schema = parquet.schema_arrow
    for column in REQUIRED:
        if column not in schema.names:
            raise EngineError(f"missing column {column!r}", column=column)
    columns = list(REQUIRED)
    if style_control:
        source_kind = _style_source(schema)
        if source_kind == "none":
            first = next(c for pair in STYLE_COLUMNS.values() for c in pair)
            raise EngineError(f"missing column {first!r}", column=first)
        columns += list(FLAT_COLUMNS) if source_kind == "flat" else ["conv_metadata"]
    if where is not None:
        if where_columns is None:
            where_columns = [
                f.name for f in schema if not pa.types.is_nested(f.type) and f.name not in columns
            ]
        for column in where_columns:
            if column not in schema.names:
                raise EngineError(f"where_columns: no column {column!r} in {source}")
        columns += [c for c in where_columns if c not in columns]
    offset = 0
    try:
        # One thread: Arrow's column threads cost 3-8x the CPU for no gain on 2 busy cores.
        # One reader per row group: a reader over the whole file keeps ~11 MB per row group
        # it has passed (1.2 GB more at 100M battles), one per group frees them.
        for group in range(parquet.metadata.num_row_groups):
            for batch in parquet.iter_batches(
                batch_size=batch_rows, row_groups=[group], columns=columns, use_threads=False
            ):
                yield offset, batch
                offset += batch.num_rows
    except pa.ArrowException as exc:
        raise EngineError(f"{source}: cannot read it ({_first_line(exc)})") from exc


_T = TypeVar("_T")


def _prefetched(items: Iterator[_T]) -> Iterator[_T]:
    """``items``, the next one produced by a second thread while the caller works on this one.

    Arrow decodes Parquet without the GIL, so decoding the next batch overlaps the numpy work
    on this one. At most two items exist at a time (the caller's and the next); exceptions
    (bad files) reach the caller in order.
    """
    done = object()
    queue: Queue[object] = Queue()
    ahead = threading.Semaphore(1)  # one item may be produced ahead of the caller's
    stop = threading.Event()

    def produce() -> None:
        try:
            while True:
                ahead.acquire()
                if stop.is_set():
                    return
                item = next(items, done)
                queue.put(item)
                if item is done:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            queue.put(_Failure(exc))

    worker = threading.Thread(target=produce, name="rate-parquet-reader", daemon=True)
    worker.start()
    try:
        while True:
            item = queue.get()
            if item is done:
                return
            if isinstance(item, _Failure):
                raise item.error
            ahead.release()  # the caller holds this one: the next may be produced
            yield cast(_T, item)
            del item
    finally:
        stop.set()
        ahead.release()
        worker.join()


@dataclass(frozen=True)
class _Failure:
    error: BaseException


def _codes(column: pa.Array) -> tuple[IntArray, list[str]]:
    """Codes (-1 for null) into the names of a string column (dictionary-encoded or not)."""
    if not pa.types.is_dictionary(column.type):
        import pyarrow.compute as pc

        column = pc.dictionary_encode(column)
    indices = column.indices
    if indices.null_count:
        raw = np.asarray(indices.to_numpy(zero_copy_only=False), dtype=np.float64)
        codes = np.where(np.isnan(raw), -1, np.nan_to_num(raw)).astype(np.int64)
    else:
        codes = np.asarray(_as_numpy(indices), dtype=np.int64)
    names = [str(v) for v in column.dictionary.to_pylist()]
    return codes, names


def _first_row(labels: IntArray, bad: NDArray[np.bool_]) -> tuple[int, int]:
    position = int(np.flatnonzero(bad)[0])
    return position, int(labels[position])


class _Scan:
    """What pass 1 keeps: model ids, pair ids, per-pair counts and style sums, the spill."""

    def __init__(self, spill: Path | None) -> None:
        self.ids: dict[str, int] = {}
        # (a id, b id) -> pair id; int32 and grown by half: 7,500^2 x 4 bytes at 5,000 models.
        self.lut = np.full((16, 16), -1, dtype=np.int32)
        self.pair_a: list[IntArray] = []
        self.pair_b: list[IntArray] = []
        self.n_pairs = 0
        self.counts = np.zeros((0, 3))  # battles per (pair id, 2 y)
        self.sf = np.zeros((K, 0))  # per pair: sum of each raw style difference
        self.sfy = np.zeros((K, 0))  # per pair: the same weighted by A's score y
        self.sff = np.zeros((len(_PRODUCTS), 0))  # per pair: sums of their products
        self.segments: list[int] = []  # battles in each spilled batch, in order
        self.spill_path = spill
        self.spill: BinaryIO | None = open(spill, "wb") if spill is not None else None  # noqa: SIM115

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()
            self.spill = None

    def _model_ids(self, names: list[str]) -> IntArray:
        out = np.empty(len(names) + 1, dtype=np.int64)
        for i, name in enumerate(names):
            out[i] = self.ids.setdefault(name, len(self.ids))
        out[-1] = -1  # code -1 (null)
        return out

    def _pair_ids(self, a: IntArray, b: IntArray) -> IntArray:
        size = self.lut.shape[0]
        if len(self.ids) > size:
            side = max(len(self.ids), size * 3 // 2)
            grown = np.full((side, side), -1, dtype=np.int32)
            grown[:size, :size] = self.lut
            self.lut = grown
        pid = self.lut[a, b]
        new = pid < 0
        if new.any():
            size = self.lut.shape[0]
            combos = np.unique(a[new] * size + b[new])
            ua, ub = combos // size, combos % size
            self.lut[ua, ub] = np.arange(self.n_pairs, self.n_pairs + len(combos), dtype=np.int32)
            self.pair_a.append(ua)
            self.pair_b.append(ub)
            self.n_pairs += len(combos)
            grow = self.n_pairs - self.counts.shape[0]
            self.counts = np.vstack([self.counts, np.zeros((grow, 3))])
            self.sf = np.hstack([self.sf, np.zeros((K, grow))])
            self.sfy = np.hstack([self.sfy, np.zeros((K, grow))])
            self.sff = np.hstack([self.sff, np.zeros((len(_PRODUCTS), grow))])
            pid = self.lut[a, b]
        return pid.astype(np.intp)  # bincount's index type: converted once, not per call

    def add(
        self, batch: pa.RecordBatch, offset: int, where: Where | None, style_control: bool
    ) -> None:
        n = batch.num_rows
        keep: IntArray | None = None
        if where is not None:
            mask = np.asarray(where(batch))
            if mask.dtype != np.bool_ or mask.shape != (n,):
                raise EngineError(
                    f"where must return a boolean array of the batch's length ({n}), "
                    f"not {mask.dtype} of shape {mask.shape}"
                )
            keep = np.flatnonzero(mask)
        labels = np.arange(offset + 1, offset + n + 1) if keep is None else offset + 1 + keep
        if len(labels) == 0:
            return
        sides = []
        for column in ("model_a", "model_b"):
            codes, names = _codes(batch.column(column))
            ids = self._model_ids(names)[codes if keep is None else codes[keep]]
            missing = ids < 0
            if missing.any():
                _, row = _first_row(labels, missing)
                raise EngineError(f"row {row}: {column} is empty", column=column, row=row)
            sides.append(ids)
        a, b = sides
        same = a == b
        if same.any():
            first, row = _first_row(labels, same)
            name = next(k for k, v in self.ids.items() if v == a[first])
            raise EngineError(
                f"row {row}: model_a and model_b are the same model ({name})",
                column="model_b",
                row=row,
            )
        codes, names = _codes(batch.column("winner"))
        scores = np.array([OUTCOMES.get(c, np.nan) for c in names] + [np.nan])
        picked = codes if keep is None else codes[keep]
        y = scores[picked]
        bad = np.isnan(y)
        if bad.any():
            first, row = _first_row(labels, bad)
            code = int(picked[first])
            value = None if code < 0 else names[code]
            raise EngineError(
                f"row {row}: winner {value!r} is not one of {', '.join(OUTCOMES)}",
                column="winner",
                row=row,
            )
        y2 = (y * 2).astype(np.int8)
        pid = self._pair_ids(a, b)
        cell = pid * 3 + y2
        self.counts += np.bincount(cell, minlength=3 * self.n_pairs).reshape(-1, 3)
        if not style_control:
            return
        raw = _style_differences(batch, keep, labels)
        for j in range(K):
            # Per (pair, outcome), then split: sums of f and of y f at the cost of one.
            by_outcome = np.bincount(cell, raw[j], 3 * self.n_pairs).reshape(-1, 3)
            self.sf[j] += by_outcome.sum(axis=1)
            self.sfy[j] += 0.5 * by_outcome[:, 1] + by_outcome[:, 2]
        for i, (j, m) in enumerate(_PRODUCTS):
            self.sff[i] += np.bincount(pid, raw[j] * raw[m], self.n_pairs)
        assert self.spill is not None and self.spill_path is not None
        try:
            self.spill.write(pid.astype(np.int32).data)
            self.spill.write(y2.data)
            self.spill.write(np.ascontiguousarray(raw).data)
        except OSError as exc:  # a full disk, mostly: the spill needs 37 bytes a battle
            raise EngineError(
                f"cannot write the spill file {self.spill_path}: {exc.strerror or exc}"
            ) from exc
        self.segments.append(len(pid))

    @property
    def n_models(self) -> int:
        return len(self.ids)


def _kept_numbers(
    values: pa.Array, column: str, keep: IntArray | None, labels: IntArray
) -> FloatArray:
    """The kept rows of a count column as float64; a null among them names its row."""
    out = np.asarray(_as_numpy(values), dtype=np.float64)
    if keep is not None:
        out = out[keep]
    if values.null_count:
        missing = np.isnan(out)
        if missing.any():
            _, row = _first_row(labels, missing)
            raise EngineError(f"row {row}: {column} is missing", column=column, row=row)
    return out


def _flat_counts(
    batch: pa.RecordBatch, keep: IntArray | None, labels: IntArray
) -> dict[str, FloatArray]:
    """The kept rows' flat style counts, read as ``read_battles`` reads them."""
    names = batch.schema.names
    if all(c in names for c in FLAT_COLUMNS):
        return {c: _kept_numbers(batch.column(c), c, keep, labels) for c in FLAT_COLUMNS}
    column = batch.column("conv_metadata")
    if not pa.types.is_struct(column.type):
        import pandas as pd

        if keep is not None:
            column = column.take(pa.array(keep))
        frame = pd.DataFrame({"conv_metadata": column.to_pylist()}, index=labels)
        flat = flatten_conv_metadata(frame)
        return {c: np.asarray(flat[c], dtype=np.float64) for c in FLAT_COLUMNS}
    out: dict[str, FloatArray] = {}
    for key, parts in CONV_METADATA_KEYS.items():
        name = f"conv_metadata.{key}"
        try:
            field = column.field(key)
            if parts is None:
                out[key] = _kept_numbers(field, name, keep, labels)
            else:
                fields = [field.field(part) for part in parts]
                if all(pa.types.is_integer(f.type) and not f.null_count for f in fields):
                    # Integer parts add exactly before the one conversion to float64.
                    total = np.add(_as_numpy(fields[0]), _as_numpy(fields[1]), dtype=np.int64)
                    for f in fields[2:]:
                        total += _as_numpy(f)
                    out[key] = (total if keep is None else total[keep]).astype(np.float64)
                    continue
                out[key] = sum(
                    (
                        _kept_numbers(f, f"{name}.{part}", keep, labels)
                        for f, part in zip(fields, parts, strict=True)
                    ),
                    start=np.zeros(len(labels)),
                )
        except (KeyError, AttributeError, TypeError, pa.ArrowInvalid) as exc:
            raise EngineError(f"{name} is missing or not a count", column=name) from exc
    return out


def _style_differences(
    batch: pa.RecordBatch, keep: IntArray | None, labels: IntArray
) -> FloatArray:
    """``data.style_differences`` of the kept rows, shape (4, n)."""
    counts = _flat_counts(batch, keep, labels)
    out = np.empty((K, len(labels)), dtype=np.float64)
    for i, element in enumerate(STYLE_ELEMENTS):
        sides = []
        for column in STYLE_COLUMNS[element]:
            values = counts[column]
            if not values.min() >= 0:  # one pass; NaN fails it too
                bad = ~np.isfinite(values) | (values < 0)
                _, row = _first_row(labels, bad)
                raise EngineError(
                    f"row {row}: {column} must be a non-negative count", column=column, row=row
                )
            sides.append(values)
        np.divide(sides[0] - sides[1], sides[0] + sides[1] + 1.0, out=out[i])
    return out
