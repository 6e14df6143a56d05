"""``rate_parquet``: the ratings of a Parquet file too large to hold in memory.

The fit is ``rate``'s, computed from sums. Every quantity the fit needs is a sum over battles:
the Newton step's gradient ``sum_i c_i (y_i - p_i) x_i`` and Hessian
``sum_i c_i p_i (1 - p_i) x_i x_i^T``, the sandwich's ``sum_i c_i^2 (y_i - p_i)^2 x_i x_i^T``,
the style features' means, variances and Gram matrices. With ``x_i = (e_a - e_b, f_i)`` each
splits into a per-pair part (``p x p`` from one ``np.bincount`` over pair ids), a pairs x
features part and a features x features part, so a batch of battles adds its share and is
dropped. Memory is bounded by the batch size and the number of pairs, not by the battles.

Passes:

1. Parquet, one batch at a time (columns, validation and row numbers as ``read_battles``;
   the ``where`` mask first; Arrow decodes the next batch on a second thread): model ids,
   battle counts per (ordered pair, outcome), per-pair sums of the raw style differences
   (plain and weighted by the outcome) and of their products. With style control each
   battle's pair id (int32), outcome (int8) and raw differences (4 x float64) are appended to
   a temporary spill file (37 bytes a battle), so later passes read compact binary, not
   Parquet.
2. From the counts and sums alone: the rated set (``identify``), the pair weights, the
   no-style fit (which is ``rate``'s exactly: without style identical battles are one row
   there too), the style z-scoring over the rated battles, which style elements are
   identified, and the first Newton evaluation (at style coefficients 0 every battle of a
   pair has the same probability).
3. With style control, one pass over the spill per later Newton evaluation (``bt.newton``,
   the in-memory fit's iteration), each giving the gradient and the Hessian at one
   ``theta``; near convergence a pass also sums the sandwich's meat, so the last one (at the
   optimum) does not need a pass of its own.

The results equal ``rate``'s on the same battles up to floating-point summation order
(``test_engine_stream`` checks 1e-6 Elo). The bootstrap needs every battle per replicate
and stays in memory (``rate``); the online Elo (a sequential replay) is not computed.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from queue import Queue
from typing import BinaryIO, Literal, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from . import bt
from .api import (
    _check_options,
    _fit,
    _identified_rows,
    _result,
    _sandwich_fit,
    rating_scale,
)
from .data import (
    CONV_METADATA_KEYS,
    OUTCOMES,
    STYLE_COLUMNS,
    STYLE_ELEMENTS,
    Battles,
    FloatArray,
    IntArray,
    battles_from_counts,
    flatten_conv_metadata,
    independent_in_gram,
)
from .errors import CannotRateError, EngineError
from .identify import Identification, identify
from .io import FLAT_COLUMNS, REQUIRED, _as_numpy, _first_line
from .result import RatingResult

K = len(STYLE_ELEMENTS)
#: Index pairs (j, l), j <= l, of the style products summed per pair in the first pass.
_PRODUCTS = [(j, m) for j in range(K) for m in range(j, K)]

Where = Callable[[pa.RecordBatch], NDArray[np.bool_]]


def rate_parquet(
    path: str | os.PathLike[str],
    *,
    style_control: bool,
    ci: Literal["sandwich", "none"] = "sandwich",
    where: Where | None = None,
    where_columns: Sequence[str] | None = None,
    anchor: tuple[str, float] | None = None,
    reweight: bool = False,
    style_l2: float = 0.0,
    batch_rows: int = 1_000_000,
    spill_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    established_min_votes: int = 0,
    anchor_fallback: bool = False,
) -> RatingResult:
    """``rate`` on the battles of a Parquet file, read ``batch_rows`` rows at a time.

    The file is in the public arena schema that ``read_battles`` reads (``model_a``,
    ``model_b``, ``winner``; style counts as the flat count columns or a ``conv_metadata``
    struct or JSON text). ``where(batch)`` returns a boolean mask of the batch's rows to rate
    (rows it drops are not validated, as if they were not in the file); the batch holds the
    columns ``where_columns`` (default: every top-level column that is not a list or a struct).
    Options mean what they mean for ``rate``; ``ci="none"`` skips the intervals (they are then
    the rating itself). ``ci="bootstrap"`` raises ``EngineError``: the bootstrap resamples
    every battle each round and is ``rate``'s only. The result is ``rate``'s on the same
    battles (to floating-point summation order), without the online Elo (``online_elo`` is
    ``None``). Rows are numbered 1, 2, ... in file order in error messages. With style
    control a spill file of 37 bytes per battle lives in ``spill_dir`` (default: the system's
    temporary directory) during the call, and each Newton pass over it runs on ``workers``
    threads (on the shared 2-vCPU VM under load, 2 cost more CPU and wall time than 1).
    """
    choice: str = ci  # callers without a type checker may pass anything
    if choice == "bootstrap":
        raise EngineError(
            "bootstrap intervals need every battle in memory: use rate() (read_battles) for "
            "them; rate_parquet gives sandwich intervals"
        )
    if choice not in ("sandwich", "none"):
        raise EngineError(f"ci must be 'sandwich' or 'none', not {choice!r}")
    _check_options("sandwich", 100, style_l2, workers, established_min_votes)
    if batch_rows < 1:
        raise EngineError(f"batch_rows must be at least 1, not {batch_rows}")
    with threadpool_limits(limits=1, user_api="blas"):
        with tempfile.TemporaryDirectory(prefix="arena-rate-", dir=spill_dir) as folder:
            scan = _Scan(Path(folder) / "battles.bin" if style_control else None)
            try:
                batches = _batches(path, style_control, where, where_columns, batch_rows)
                for offset, batch in _prefetched(batches):
                    scan.add(batch, offset, where, style_control)
            finally:
                scan.close()
            return _rate_scanned(
                scan,
                style_control=style_control,
                ci=ci,
                workers=workers,
                anchor=anchor,
                reweight=reweight,
                style_l2=style_l2,
                established_min_votes=established_min_votes,
                anchor_fallback=anchor_fallback,
            )


# ---------------------------------------------------------------------------------------------
# Pass 1: Parquet to counts, sums and the spill


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


# ---------------------------------------------------------------------------------------------
# From the counts: identification, the no-style fit, the style statistics


@dataclass(frozen=True)
class _Rated:
    """The battles among the rated models, as grouped ``Battles``, and where each pair is."""

    battles: Battles  # grouped rows, sorted like ``encode``'s, feature names set with style
    split: Identification
    n_input: int
    index: IntArray  # scan pair id -> pair index in ``battles`` (n_pairs when not rated)


def _rated(scan: _Scan, reweight: bool) -> _Rated:
    n_input = int(round(float(scan.counts.sum())))
    if n_input == 0:
        raise CannotRateError("no battles to rate")
    pair_a = np.concatenate(scan.pair_a)
    pair_b = np.concatenate(scan.pair_b)
    by_id = {i: name for name, i in scan.ids.items()}
    present = np.unique(np.concatenate([pair_a, pair_b]))
    models = sorted(by_id[int(i)] for i in present)
    if len(models) < 2:
        raise EngineError("at least 2 models are needed to rate, found " + str(len(models)))
    rank = np.full(scan.n_models, -1, dtype=np.int64)
    rank[[scan.ids[m] for m in models]] = np.arange(len(models))
    a, b = rank[pair_a], rank[pair_b]
    battles = _grouped(models, a, b, scan.counts, reweight)
    split = identify(battles)
    if not split.ratable:
        raise CannotRateError(split.reason_text(), split.provisional)
    if not split.everyone_rated:
        kept = [m for m, k in zip(models, split.rated_mask, strict=True) if k]
        inside = split.rated_mask[a] & split.rated_mask[b]
        sub = np.full(len(models), -1, dtype=np.int64)
        sub[split.rated_mask] = np.arange(len(kept))
        a, b = np.where(inside, sub[a], -1), np.where(inside, sub[b], -1)
        battles = _grouped(kept, a, b, scan.counts * inside[:, None], reweight)
    p = battles.n_models
    code = np.where(a >= 0, a * p + b, -1)
    present_codes = battles.pair_a * p + battles.pair_b
    index = np.searchsorted(present_codes, code)
    index = np.where(code >= 0, index, battles.n_pairs)
    return _Rated(battles=battles, split=split, n_input=n_input, index=index)


def _grouped(
    models: list[str], a: IntArray, b: IntArray, counts: FloatArray, reweight: bool
) -> Battles:
    p = len(models)
    inside = a >= 0
    full = np.zeros(p * p * 3)
    for y2 in range(3):
        full[(a[inside] * p + b[inside]) * 3 + y2] = counts[inside, y2]
    return battles_from_counts(models, full, reweight=reweight)


@dataclass(frozen=True)
class _Style:
    """The z-scoring and the elements kept (in ``STYLE_ELEMENTS`` order)."""

    kept: IntArray  # raw element indices kept
    mean: FloatArray  # (len(kept),)
    std: FloatArray
    degenerate: tuple[str, ...]


def _style_statistics(scan: _Scan, rated: _Rated, style_l2: float) -> tuple[_Style, bt.Rows]:
    """``encode``'s z-scoring and element checks, then ``_identified_rows``', from the sums.

    Returns the kept elements and the rows of the grouped battles (for the reference model and
    the starting point).
    """
    battles = rated.battles
    inside = rated.index < battles.n_pairs
    n = float(battles.n_battles)
    mean = scan.sf[:, inside].sum(axis=1) / n
    products = np.zeros((K, K))
    for i, (j, m) in enumerate(_PRODUCTS):
        products[j, m] = products[m, j] = scan.sff[i, inside].sum() / n
    covariance = products - np.outer(mean, mean)
    variance = np.diag(covariance).copy()
    # A constant element has variance 0 up to rounding in these sums (exactly 0 in ``encode``).
    scale = np.maximum(np.diag(products), 1e-300)
    varies = variance > 1e-13 * scale
    std = np.sqrt(np.where(varies, variance, 1.0))
    candidates = np.flatnonzero(varies)
    gram = covariance[np.ix_(candidates, candidates)] / np.outer(std[candidates], std[candidates])
    kept = candidates[independent_in_gram(gram)]
    # The c-weighted Gram of (e_a - e_b, z-scored features), as ``bt.identified_features``.
    rows = bt.rows_from_battles(battles, style_l2)
    weight = np.add.reduceat(rows.c, rows.starts) / np.add.reduceat(battles.mult, battles.starts)
    if len(kept):
        mz, sz = mean[kept], std[kept]
        per_pair_n = np.add.reduceat(battles.mult, battles.starts)
        sf = _to_rated(scan.sf[kept], rated.index, battles.n_pairs)
        cross = weight * (sf - np.outer(mz, per_pair_n)) / sz[:, None]
        sff = np.zeros((len(kept), len(kept), battles.n_pairs))
        for i, (j, m) in enumerate(_PRODUCTS):
            if j in kept and m in kept:
                jj, mm = int(np.flatnonzero(kept == j)[0]), int(np.flatnonzero(kept == m)[0])
                sff[jj, mm] = sff[mm, jj] = _to_rated(
                    scan.sff[i : i + 1], rated.index, battles.n_pairs
                )[0]
        raw_gram = np.einsum("jmq,q->jm", sff, weight)
        raw_sf = sf @ weight
        total = float(np.dot(weight, per_pair_n))
        zgram = (
            raw_gram - np.outer(mz, raw_sf) - np.outer(raw_sf, mz) + total * np.outer(mz, mz)
        ) / np.outer(sz, sz)
        full = bt.outer_from_sums(rows, _c_per_pair(rows), cross, zgram)
        identified = bt.identified_in_gram(full, battles.n_models)
        kept = kept[identified]
    names = {STYLE_ELEMENTS[j] for j in kept}
    style = _Style(
        kept=kept,
        mean=mean[kept],
        std=std[kept],
        degenerate=tuple(e for e in STYLE_ELEMENTS if e not in names),
    )
    return style, rows


def _c_per_pair(rows: bt.Rows) -> FloatArray:
    return np.add.reduceat(rows.c, rows.starts)


def _to_rated(per_scan_pair: FloatArray, index: IntArray, n_pairs: int) -> FloatArray:
    """Per-pair sums over scan pair ids -> per rated pair (``_Rated.battles`` order)."""
    out = np.zeros((per_scan_pair.shape[0], n_pairs + 1))
    for j in range(per_scan_pair.shape[0]):
        out[j] = np.bincount(index, per_scan_pair[j], n_pairs + 1)
    return out[:, :-1]


# ---------------------------------------------------------------------------------------------
# Pass 3: Newton over the spill


#: A Newton evaluation after one whose gradient max-norm is below this is likely the last
#: (Newton converges quadratically: 0.5 -> 1e-6 -> 1e-12 on the benchmark), so it also sums
#: the sandwich's meat; if the last one did not, one more pass sums it.
MEAT_AFTER = 1e-3


class _Sums:
    """Sums of ``v``, ``v f_j`` (per scan pair) and ``v f f^T`` over raw style differences."""

    def __init__(self, n_scan_pairs: int, k: int, with_gram: bool) -> None:
        self.per_pair = np.zeros(n_scan_pairs)
        self.cross = np.zeros((k, n_scan_pairs)) if with_gram else None
        self.features = np.zeros(k)  # sum_i v_i f_i, when there is no ``cross``
        self.gram = np.zeros((k, k)) if with_gram else None

    def add(self, pid: NDArray[np.intp], v: FloatArray, raw: FloatArray) -> None:
        n = len(self.per_pair)
        self.per_pair += np.bincount(pid, v, n)
        if self.cross is None or self.gram is None:
            self.features += raw @ v
            return
        weighted = raw * v
        for j in range(len(raw)):
            self.cross[j] += np.bincount(pid, weighted[j], n)
        self.gram += weighted @ raw.T

    def merge(self, other: _Sums) -> None:
        self.per_pair += other.per_pair
        self.features += other.features
        if self.cross is not None and other.cross is not None:
            self.cross += other.cross
        if self.gram is not None and other.gram is not None:
            self.gram += other.gram


class _Spill:
    """Passes over the spill: gradient, Hessian and meat at a given ``theta``.

    Sums are taken over the raw style differences ``r`` and scan pair ids, and turned into
    sums over z-scored features ``(r - mean) / std`` and rated pairs afterwards (a few
    p x k operations), so the per-battle work is one ``bincount`` per sum and no rescaling.
    """

    def __init__(
        self, scan: _Scan, rated: _Rated, style: _Style, rows: bt.Rows, workers: int
    ) -> None:
        assert scan.spill_path is not None
        self.workers = workers
        self.scan = scan
        self.path = scan.spill_path
        self.segments = scan.segments
        self.index = rated.index
        self.rows = rows
        self.style = style
        self.n_scan_pairs = len(rated.index)
        n_pairs = rated.battles.n_pairs
        # Per scan pair: the battle's likelihood weight c (0 outside the rated set).
        weight = np.zeros(n_pairs + 1)
        weight[:n_pairs] = _c_per_pair(rows) / np.add.reduceat(
            rated.battles.mult, rated.battles.starts
        )
        self.weight = weight[self.index]
        self.unit = bool(np.all(self.weight == 1.0))
        self.meat: FloatArray | None = None
        self.meat_at: FloatArray | None = None
        self.last_gmax = np.inf

    def evaluate(self, theta: FloatArray) -> tuple[FloatArray, Callable[[], FloatArray]]:
        with_meat = self.last_gmax < MEAT_AFTER
        rows = self.rows
        g_sums: _Sums | None
        h_sums: _Sums | None
        m_sums: _Sums | None = None
        if not theta[rows.n_models :].any() and not with_meat:
            g_sums, h_sums = self._sums_without_style(theta)
        else:
            g_sums, h_sums, m_sums = self._pass(theta, gradient=True, meat=with_meat)
        assert g_sums is not None and h_sums is not None
        p, k = rows.n_models, len(self.style.kept)
        g = np.empty(p + k)
        per_pair, cross, _ = self._standardised(g_sums)
        g[:p] = bt._to_models(rows, per_pair)
        g[p:] = cross - rows.penalty * theta[p:]
        hess = self._outer(h_sums)
        hess[p:, p:] += rows.penalty * np.eye(k)
        self.meat = self._outer(m_sums) if m_sums is not None else None
        self.meat_at = theta.copy()
        self.last_gmax = float(np.max(np.abs(g)))
        return g, lambda: hess

    def meat_at_optimum(self, theta: FloatArray) -> FloatArray:
        """The sandwich's meat at ``theta`` (the fit's optimum): one more pass if needed."""
        if self.meat is None or self.meat_at is None or not np.array_equal(self.meat_at, theta):
            _, _, m_sums = self._pass(theta, gradient=False, meat=True)
            assert m_sums is not None
            self.meat = self._outer(m_sums)
        return self.meat

    def _sums_without_style(self, theta: FloatArray) -> tuple[_Sums, _Sums]:
        """The gradient's and the Hessian's sums at style coefficients 0 (the starting point),
        from pass 1's per-pair sums: every battle of a pair then has the same probability."""
        rows, scan = self.rows, self.scan
        n_pairs, kept = rows.n_pairs, self.style.kept
        k = len(kept)
        d = np.zeros(n_pairs + 1)
        d[:n_pairs] = theta[rows.pair_a] - theta[rows.pair_b]
        prob = bt.expit(d[self.index])
        battles = scan.counts.sum(axis=1)
        points = 0.5 * scan.counts[:, 1] + scan.counts[:, 2]
        g_sums = _Sums(self.n_scan_pairs, k, with_gram=False)
        g_sums.per_pair = self.weight * (points - battles * prob)
        g_sums.features = (scan.sfy[kept] - prob * scan.sf[kept]) @ self.weight
        curv = self.weight * prob * (1.0 - prob)
        h_sums = _Sums(self.n_scan_pairs, k, with_gram=True)
        h_sums.per_pair = curv * battles
        h_sums.cross = curv * scan.sf[kept]
        products = scan.sff @ curv
        gram = np.zeros((K, K))
        for i, (j, m) in enumerate(_PRODUCTS):
            gram[j, m] = gram[m, j] = products[i]
        h_sums.gram = gram[np.ix_(kept, kept)]
        return g_sums, h_sums

    def _pass(
        self, theta: FloatArray, *, gradient: bool, meat: bool
    ) -> tuple[_Sums | None, _Sums | None, _Sums | None]:
        """One pass over the spill, its segments split between ``workers`` threads (numpy's
        array loops and ``bincount`` release the GIL); each sums its share, the shares add."""
        rows = self.rows
        p, n_pairs = rows.n_models, rows.n_pairs
        # z = theta_a - theta_b + beta . (r - mean) / std, with the constant folded into d.
        slope = theta[p:] / self.style.std
        d = np.zeros(n_pairs + 1)
        d[:n_pairs] = theta[rows.pair_a] - theta[rows.pair_b] - float(slope @ self.style.mean)
        d_scan = d[self.index]
        count = max(1, min(self.workers, len(self.segments)))
        bounds = np.linspace(0, len(self.segments), count + 1).round().astype(int)
        shares = [range(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]

        def run(share: range) -> tuple[_Sums | None, _Sums | None, _Sums | None]:
            return self._pass_share(share, d_scan, slope, gradient=gradient, meat=meat)

        if count == 1:
            return run(shares[0])
        with ThreadPoolExecutor(max_workers=count) as pool:
            parts = list(pool.map(run, shares))
        first = parts[0]
        for other in parts[1:]:
            for mine, theirs in zip(first, other, strict=True):
                if mine is not None and theirs is not None:
                    mine.merge(theirs)
        return first

    def _pass_share(
        self,
        share: range,
        d_scan: FloatArray,
        slope: FloatArray,
        *,
        gradient: bool,
        meat: bool,
    ) -> tuple[_Sums | None, _Sums | None, _Sums | None]:
        kept = self.style.kept
        k = len(kept)
        g_sums = _Sums(self.n_scan_pairs, k, with_gram=False) if gradient else None
        h_sums = _Sums(self.n_scan_pairs, k, with_gram=True) if gradient else None
        m_sums = _Sums(self.n_scan_pairs, k, with_gram=True) if meat else None
        every = k == K
        for pid, y2, raw_all in self._segments(share):
            raw = raw_all if every else raw_all[kept]
            z = d_scan[pid]
            if k:
                z += slope @ raw
            prob = bt.expit(z)
            resid: FloatArray = np.multiply(y2, 0.5, dtype=np.float64)
            resid -= prob
            c = None if self.unit else self.weight[pid]
            if c is not None:
                resid *= c
            if g_sums is not None and h_sums is not None:
                g_sums.add(pid, resid, raw)
                curv: FloatArray = 1.0 - prob
                curv *= prob
                if c is not None:
                    curv *= c
                h_sums.add(pid, curv, raw)
            if m_sums is not None:
                resid *= resid
                m_sums.add(pid, resid, raw)
        return g_sums, h_sums, m_sums

    def _standardised(self, sums: _Sums) -> tuple[FloatArray, FloatArray, FloatArray | None]:
        """Per rated pair sum of v; sum of v z (per rated pair with a gram, else in total);
        and sum of v z z^T, for z the z-scored features."""
        mean, std = self.style.mean, self.style.std
        n_pairs = self.rows.n_pairs
        per_pair = _to_rated(sums.per_pair[None, :], self.index, n_pairs)[0]
        total = float(sums.per_pair.sum())
        if sums.cross is None or sums.gram is None:
            return per_pair, (sums.features - mean * total) / std, None
        cross_raw = _to_rated(sums.cross, self.index, n_pairs)
        cross = (cross_raw - np.outer(mean, per_pair)) / std[:, None]
        a = sums.cross.sum(axis=1)
        gram = sums.gram - np.outer(mean, a) - np.outer(a, mean) + total * np.outer(mean, mean)
        return per_pair, cross, gram / np.outer(std, std)

    def _outer(self, sums: _Sums) -> FloatArray:
        per_pair, cross, gram = self._standardised(sums)
        if len(self.style.kept) == 0:
            return bt.outer_from_sums(self.rows, per_pair, None, None)
        return bt.outer_from_sums(self.rows, per_pair, cross, gram)

    def _segments(
        self, share: range
    ) -> Iterator[tuple[NDArray[np.intp], NDArray[np.int8], FloatArray]]:
        """The spilled batches ``share`` (indices into ``segments``), read into one buffer."""
        width = 4 + 1 + 8 * K  # bytes per battle: pair id, 2 y, raw differences
        size = max((self.segments[i] for i in share), default=0)
        buffer = bytearray(size * width)
        view = memoryview(buffer)
        with open(self.path, "rb") as handle:
            handle.seek(sum(self.segments[: share.start]) * width)
            for i in share:
                m = self.segments[i]
                nbytes = m * width
                if handle.readinto(view[:nbytes]) != nbytes:
                    raise EngineError("the spill file ended early (was it removed?)")
                pid = np.frombuffer(buffer, np.int32, m, 0).astype(np.intp)
                y2 = np.frombuffer(buffer, np.int8, m, 4 * m)
                raw = np.frombuffer(buffer, np.float64, K * m, 5 * m).reshape(K, m)
                yield pid, y2, raw


# ---------------------------------------------------------------------------------------------
# The result


def _rate_scanned(
    scan: _Scan,
    *,
    style_control: bool,
    ci: str,
    anchor: tuple[str, float] | None,
    reweight: bool,
    style_l2: float,
    workers: int,
    established_min_votes: int,
    anchor_fallback: bool,
) -> RatingResult:
    rated = _rated(scan, reweight)
    battles = rated.battles
    scale = rating_scale(
        battles,
        rated.split,
        anchor=anchor,
        established_min_votes=established_min_votes,
        anchor_fallback=anchor_fallback,
    )
    p = battles.n_models
    if not style_control:
        battles, rows = _identified_rows(battles, style_l2)
        fit = _fit(
            battles,
            rows,
            weights=scale.weights,
            ci="sandwich",
            rounds=100,
            seed=0,
            progress=None,
            workers=None,
        )
    else:
        style, rows = _style_statistics(scan, rated, style_l2)
        k = len(style.kept)
        rows = replace(rows, penalty=style_l2 * battles.n_battles, l2=style_l2)
        battles = replace(
            battles,
            feature_names=tuple(STYLE_ELEMENTS[j] for j in style.kept),
            degenerate=style.degenerate,
        )
        coarse = bt.fit(bt.pair_rows(rows))
        start = np.concatenate([coarse.theta, np.zeros(k)])
        ref = bt.reference_model(p, rows.pair_a, rows.pair_b, _c_per_pair(rows))
        spill = _Spill(scan, rated, style, rows, workers)
        result = bt.newton(spill.evaluate, start, p, ref)
        meat = spill.meat_at_optimum(result.theta)
        cov = bt.robust_covariance(result, meat, p, penalty=rows.penalty, l2=style_l2)
        fit = _sandwich_fit(result, cov, p, scale.weights)
    if ci == "none":
        fit = replace(
            fit, lower=fit.theta, upper=fit.theta, beta_lower=fit.beta, beta_upper=fit.beta
        )
    return _result(
        battles,
        fit,
        provisional=rated.split.provisional,
        n_input=rated.n_input,
        style_control=style_control,
        ci=ci,
        rounds=None,
        seed=None,
        scale=scale,
        established_min_votes=established_min_votes,
        reweight=reweight,
        style_l2=style_l2,
        with_online_elo=False,
    )


__all__ = ["rate_parquet"]
