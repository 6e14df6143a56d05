"""The streamed fit's second step (``stream``), from the first pass's counts and sums alone, no
I/O: the rated set (``identify``), the pair weights, the no-style fit, the style z-scoring over
the rated battles and which style elements are identified."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import bt
from .data import (
    STYLE_ELEMENTS,
    Battles,
    FloatArray,
    IntArray,
    Propensity,
    battles_from_counts,
    independent_in_gram,
)
from .errors import CannotRateError, EngineError
from .identify import Identification, identify
from .stream_scan import _PRODUCTS, K, _Scan


@dataclass(frozen=True)
class _Rated:
    """The battles among the rated models, as grouped ``Battles``, and where each pair is."""

    battles: Battles  # grouped rows, sorted like ``encode``'s, feature names set with style
    split: Identification
    n_input: int
    index: IntArray  # scan pair id -> pair index in ``battles`` (n_pairs when not rated)


def _rated(
    scan: _Scan, reweight: bool, position: bool = False, propensity: Propensity | None = None
) -> _Rated:
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
    battles = _grouped(models, a, b, scan.counts, reweight, position, propensity)
    split = identify(battles)
    if not split.ratable:
        raise CannotRateError(split.reason_text(), split.provisional)
    if not split.everyone_rated:
        kept = [m for m, k in zip(models, split.rated_mask, strict=True) if k]
        inside = split.rated_mask[a] & split.rated_mask[b]
        sub = np.full(len(models), -1, dtype=np.int64)
        sub[split.rated_mask] = np.arange(len(kept))
        a, b = np.where(inside, sub[a], -1), np.where(inside, sub[b], -1)
        counts = scan.counts * inside[:, None]
        battles = _grouped(kept, a, b, counts, reweight, position, propensity)
    p = battles.n_models
    code = np.where(a >= 0, a * p + b, -1)
    present_codes = battles.pair_a * p + battles.pair_b
    index = np.searchsorted(present_codes, code)
    index = np.where(code >= 0, index, battles.n_pairs)
    return _Rated(battles=battles, split=split, n_input=n_input, index=index)


def _grouped(
    models: list[str],
    a: IntArray,
    b: IntArray,
    counts: FloatArray,
    reweight: bool,
    position: bool,
    propensity: Propensity | None,
) -> Battles:
    p = len(models)
    inside = a >= 0
    full = np.zeros(p * p * 3)
    for y2 in range(3):
        full[(a[inside] * p + b[inside]) * 3 + y2] = counts[inside, y2]
    return battles_from_counts(
        models, full, reweight=reweight, position=position, propensity=propensity
    )


@dataclass(frozen=True)
class _Style:
    """The z-scoring and the elements kept (in ``STYLE_ELEMENTS`` order), and whether the
    position covariate is in the fit (after them, identified)."""

    kept: IntArray  # raw element indices kept
    mean: FloatArray  # (len(kept),)
    std: FloatArray
    degenerate: tuple[str, ...]
    position: bool = False


def _style_statistics(scan: _Scan, rated: _Rated, style_l2: float) -> tuple[_Style, bt.Rows]:
    """``encode``'s z-scoring and element checks, then ``_identified_rows``', from the sums.

    Returns the kept elements and the rows of the grouped battles (for the reference model and
    the starting point; without the position's feature row, which ``_Spill`` adds from sums).
    """
    battles = rated.battles
    asked_position = battles.position
    battles = without_position(battles)
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
    position = False
    if len(kept) or asked_position:
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
        per_pair = _c_per_pair(rows)
        if asked_position:
            cross, zgram = with_position(per_pair, cross, zgram)
        full = bt.outer_from_sums(rows, per_pair, cross, zgram)
        identified = bt.identified_in_gram(full, battles.n_models)
        if asked_position:
            position = bool(identified[-1])
            identified = identified[:-1]
        kept = kept[identified]
    names = {STYLE_ELEMENTS[j] for j in kept}
    style = _Style(
        kept=kept,
        mean=mean[kept],
        std=std[kept],
        degenerate=tuple(e for e in STYLE_ELEMENTS if e not in names),
        position=position,
    )
    return style, rows


def without_position(battles: Battles) -> Battles:
    """Grouped ``battles`` without the position's feature row (the streamed style fit sums
    the style features from the spill and derives the position's sums from the pairs')."""
    if not battles.position:
        return battles
    return replace(battles, features=None, feature_names=())


def with_position(
    per_pair: FloatArray, cross: FloatArray, gram: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Sums over ``(f, 1)`` from sums over ``f``: the constant feature's per-pair sum of ``v``
    is ``per_pair``, its products with ``f_j`` are ``cross[j]``'s total, its square is the
    total of ``v``."""
    k = gram.shape[0]
    cross_out = np.vstack([cross, per_pair[None, :]])
    gram_out = np.zeros((k + 1, k + 1))
    gram_out[:k, :k] = gram
    gram_out[k, :k] = gram_out[:k, k] = cross.sum(axis=1)
    gram_out[k, k] = per_pair.sum()
    return cross_out, gram_out


def _c_per_pair(rows: bt.Rows) -> FloatArray:
    return np.add.reduceat(rows.c, rows.starts)


def _to_rated(per_scan_pair: FloatArray, index: IntArray, n_pairs: int) -> FloatArray:
    """Per-pair sums over scan pair ids -> per rated pair (``_Rated.battles`` order)."""
    out = np.zeros((per_scan_pair.shape[0], n_pairs + 1))
    for j in range(per_scan_pair.shape[0]):
        out[j] = np.bincount(index, per_scan_pair[j], n_pairs + 1)
    return out[:, :-1]
