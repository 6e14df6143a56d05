"""The streamed fit's later passes (``stream``): with style control, one pass over the spill
file per Newton evaluation, each giving the gradient and the Hessian at one ``theta`` (near
convergence also the sandwich's meat), read by worker threads a share of segments each."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.typing import NDArray

from . import bt
from .data import (
    FloatArray,
)
from .errors import EngineError
from .stream_scan import _PRODUCTS, K, _Scan
from .stream_sums import _c_per_pair, _Rated, _Style, _to_rated, with_position

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
    The position covariate (``style.position``), a constant, needs no sums of its own: its
    coefficient ``gamma`` (last in ``theta``) is folded into each pair's logit offset and its
    sums are the pairs' and the style features' totals (``with_position``).
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
        p, k = rows.n_models, len(self.style.kept)
        if not theta[p : p + k].any() and not with_meat:
            g_sums, h_sums = self._sums_without_style(theta)
        else:
            g_sums, h_sums, m_sums = self._pass(theta, gradient=True, meat=with_meat)
        assert g_sums is not None and h_sums is not None
        g = np.empty(len(theta))
        per_pair, cross, _ = self._standardised(g_sums)
        g[:p] = bt._to_models(rows, per_pair)
        g[p : p + k] = cross - rows.penalty * theta[p : p + k]
        if self.style.position:
            g[p + k] = per_pair.sum()
        hess = self._outer(h_sums)
        hess[p : p + k, p : p + k] += rows.penalty * np.eye(k)
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
        d[:n_pairs] = theta[rows.pair_a] - theta[rows.pair_b] + self._gamma(theta)
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
        # z = theta_a - theta_b + beta . (r - mean) / std [+ gamma], constants folded into d.
        slope = theta[p : p + len(self.style.kept)] / self.style.std
        d = np.zeros(n_pairs + 1)
        d[:n_pairs] = theta[rows.pair_a] - theta[rows.pair_b] - float(slope @ self.style.mean)
        d[:n_pairs] += self._gamma(theta)
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

    def _gamma(self, theta: FloatArray) -> float:
        """The position coefficient in ``theta`` (0 without the position covariate)."""
        return float(theta[-1]) if self.style.position else 0.0

    def _outer(self, sums: _Sums) -> FloatArray:
        per_pair, cross, gram = self._standardised(sums)
        if self.style.position:
            assert gram is not None
            cross, gram = with_position(per_pair, cross, gram)
        elif len(self.style.kept) == 0:
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
