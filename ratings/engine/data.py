"""From a battle table to the arrays the fit works on.

Why one module: every way into the fit (a DataFrame, a Parquet batch, counts) ends in the same
encoding; the column checks, the models' encoding and the style differences run in one order, so
one module holds the one way in.

The public arena schema is one row per battle: ``model_a``, ``model_b``, ``winner`` in
``{"model_a", "model_b", "tie", "tie (bothbad)"}`` and, for style control, the summed style counts
of each side as flat integer columns (see ``STYLE_COLUMNS``) or as one ``conv_metadata`` object per
row (``flatten_conv_metadata`` turns the latter into the former).

Rows are sorted by ordered pair ``(a, b)`` so that every per-pair sum is one contiguous
``np.add.reduceat`` and no dense battles x models design matrix is ever built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

# The style schema is the answer_style package's (Django-free, shared with the arena).
from answer_style.schema import CONV_METADATA_KEYS as CONV_METADATA_KEYS
from answer_style.schema import STYLE_COLUMNS as STYLE_COLUMNS
from answer_style.schema import STYLE_ELEMENTS as STYLE_ELEMENTS

from .errors import CannotRateError, EngineError

if TYPE_CHECKING:
    import pandas as pd

#: The name of the position covariate among ``Battles.feature_names``: a row of ones (side A,
#: ``model_a``, is the answer shown on the left), last after the style features and neither
#: centred nor scaled, so its coefficient is the log-odds advantage of the left side.
POSITION = "position"

#: Probability that a battle showed its pair, keyed by the two model names (either order);
#: the inverse-propensity weights are ``1 / probability``.
Propensity = Mapping[tuple[str, str], float]

#: Outcome of a battle from model A's side; a tie of either kind is half a win.
OUTCOMES: Mapping[str, float] = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Battles:
    """Battles encoded as integers and sorted by ordered pair.

    ``rows`` are battles when style features are present, or groups of identical
    ``(a, b, outcome)`` battles (``mult`` battles each) when they are not.
    """

    models: list[str]  # model names, index = model id (sorted by name)
    pair_a: IntArray  # (P,) model id of side A for each ordered pair present
    pair_b: IntArray  # (P,) model id of side B
    starts: IntArray  # (P,) first row of each pair's segment
    row_pair: IntArray  # (R,) pair index of each row
    y: FloatArray  # (R,) outcome from A's side: 1, 0.5 or 0
    mult: FloatArray  # (R,) battles the row stands for
    pair_weight: FloatArray | None  # (P,) pair weight (see ``encode``), None when unweighted
    features: FloatArray | None  # (k, R) z-scored style features then the position's ones
    feature_names: tuple[str, ...]  # element names of the rows of ``features`` (or POSITION)
    degenerate: tuple[str, ...]  # style elements dropped: constant, collinear, or confounded
    n_battles: int
    file_a: IntArray  # (n,) model id of side A in input order (for the online Elo)
    file_b: IntArray  # (n,)
    file_y: FloatArray  # (n,)

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_pairs(self) -> int:
        return len(self.pair_a)

    @property
    def position(self) -> bool:
        """Whether the last feature row is the position covariate."""
        return bool(self.feature_names) and self.feature_names[-1] == POSITION


def without_features(battles: Battles, keep: NDArray[np.bool_]) -> Battles:
    """``battles`` with only the feature rows ``keep`` marks; the others become degenerate."""
    if battles.features is None or keep.all():
        return battles
    dropped = {name for name, k in zip(battles.feature_names, keep, strict=True) if not k}
    dropped |= set(battles.degenerate)
    return replace(
        battles,
        features=np.ascontiguousarray(battles.features[keep]),
        feature_names=tuple(n for n, k in zip(battles.feature_names, keep, strict=True) if k),
        degenerate=tuple(name for name in STYLE_ELEMENTS if name in dropped),
    )


class BattleTable:
    """Battle columns as plain arrays, the engine's input without pandas.

    ``strings`` maps a column to ``(codes, names)`` (code -1 = missing), ``numbers`` maps a
    column to its values. Rows are labelled ``first_label``, ``first_label + 1``, ... in error
    messages (or by ``labels``). ``io.read_battles`` builds one straight from Arrow for Parquet
    files, skipping pandas' import and conversion.
    """

    def __init__(
        self,
        strings: Mapping[str, tuple[IntArray, list[str]]],
        numbers: Mapping[str, NDArray[Any]],
        n: int,
        *,
        first_label: int = 0,
        labels: IntArray | None = None,
    ) -> None:
        self.strings = dict(strings)
        self.numbers = dict(numbers)
        self.n = n
        self.first_label = first_label
        self.labels = labels

    def take(self, positions: IntArray) -> BattleTable:
        """The rows at ``positions`` (in that order), keeping their labels."""
        labels = self.labels[positions] if self.labels is not None else positions + self.first_label
        return BattleTable(
            {c: (codes[positions], names) for c, (codes, names) in self.strings.items()},
            {c: values[positions] for c, values in self.numbers.items()},
            len(positions),
            labels=labels,
        )

    @property
    def columns(self) -> list[str]:
        return [*self.strings, *self.numbers]

    def __len__(self) -> int:
        return self.n

    def codes(self, column: str) -> tuple[IntArray, list[str]]:
        return self.strings[column]

    def values(self, column: str) -> FloatArray:
        if column in self.numbers:
            return np.asarray(self.numbers[column], dtype=np.float64)
        codes, names = self.strings[column]
        parsed = np.array([_number(name) for name in names] + [np.nan])
        return np.asarray(parsed[codes], dtype=np.float64)

    def label(self, position: int) -> object:
        if self.labels is not None:
            return int(self.labels[position])
        return position + self.first_label

    def value(self, column: str, position: int) -> object:
        if column in self.numbers:
            return self.numbers[column][position]
        codes, names = self.strings[column]
        code = int(codes[position])
        return None if code < 0 else names[code]


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


class _FrameTable(BattleTable):
    """A pandas DataFrame seen as a ``BattleTable`` (categoricals keep their codes)."""

    def __init__(self, df: pd.DataFrame) -> None:
        self.df = df
        self.n = len(df)

    @property
    def columns(self) -> list[str]:
        return [str(c) for c in self.df.columns]

    def codes(self, column: str) -> tuple[IntArray, list[str]]:
        import pandas as pd

        series = self.df[column]
        if isinstance(series.dtype, pd.CategoricalDtype):
            return (
                np.asarray(series.cat.codes, dtype=np.int64),
                [str(c) for c in series.cat.categories],
            )
        codes, uniques = pd.factorize(series, use_na_sentinel=True)
        return np.asarray(codes, dtype=np.int64), [str(c) for c in uniques]

    def values(self, column: str) -> FloatArray:
        import pandas as pd

        numeric = pd.to_numeric(self.df[column], errors="coerce")
        return np.asarray(numeric.to_numpy(dtype=np.float64, na_value=np.nan))

    def label(self, position: int) -> object:
        return self.df.index[position]

    def take(self, positions: IntArray) -> BattleTable:
        return _FrameTable(self.df.iloc[positions])

    def value(self, column: str, position: int) -> object:
        return self.df[column].iloc[position]


def as_table(source: pd.DataFrame | BattleTable) -> BattleTable:
    return source if isinstance(source, BattleTable) else _FrameTable(source)


def _require_columns(table: BattleTable, columns: tuple[str, ...]) -> None:
    present = set(table.columns)
    for column in columns:
        if column not in present:
            raise EngineError(f"missing column {column!r}", column=column)


def _first_bad(table: BattleTable, mask: NDArray[np.bool_]) -> tuple[int, object]:
    position = int(np.flatnonzero(mask)[0])
    return position, table.label(position)


def _encode_models(table: BattleTable) -> tuple[list[str], IntArray, IntArray]:
    """Model ids (names sorted) for both sides, mapped through each column's own codes."""
    codes: list[IntArray] = []
    uniques: list[list[str]] = []
    for column in ("model_a", "model_b"):
        code, categories = table.codes(column)
        missing = code < 0
        if missing.any():
            _, row = _first_bad(table, missing)
            raise EngineError(f"row {row}: {column} is empty", column=column, row=row)
        codes.append(code)
        uniques.append(categories)
    # Only names that occur: a subset of rows (``take``) keeps its parent's category list,
    # and a model without battles would leave the fit singular.
    used = [
        {categories[i] for i in np.flatnonzero(np.bincount(code, minlength=len(categories)))}
        for code, categories in zip(codes, uniques, strict=True)
    ]
    names = sorted(used[0] | used[1])
    position = {name: i for i, name in enumerate(names)}
    ids = [
        np.array([position.get(u, -1) for u in categories], dtype=np.int64)[code]
        for code, categories in zip(codes, uniques, strict=True)
    ]
    same = ids[0] == ids[1]
    if same.any():
        first, row = _first_bad(table, same)
        raise EngineError(
            f"row {row}: model_a and model_b are the same model ({names[ids[0][first]]})",
            column="model_b",
            row=row,
        )
    return names, ids[0], ids[1]


def encode_outcomes(table: BattleTable) -> FloatArray:
    """Winner strings to A's score (1, 0.5, 0); an unknown value names its first row."""
    code, categories = table.codes("winner")
    scores = np.array([OUTCOMES.get(c, np.nan) for c in categories] + [np.nan])
    y = scores[code]  # code -1 (missing) picks the trailing NaN
    bad = np.isnan(y)
    if bad.any():
        first, row = _first_bad(table, bad)
        raise EngineError(
            f"row {row}: winner {table.value('winner', first)!r} is not one of "
            f"{', '.join(OUTCOMES)}",
            column="winner",
            row=row,
        )
    return np.ascontiguousarray(y, dtype=np.float64)


def style_differences(
    source: pd.DataFrame | BattleTable,
) -> tuple[FloatArray, tuple[str, ...]]:
    """Raw style differences ``(a - b) / (a + b + 1)`` per element, shape (4, n)."""
    table = as_table(source)
    _require_columns(table, tuple(c for pair in STYLE_COLUMNS.values() for c in pair))
    out = np.empty((len(STYLE_ELEMENTS), len(table)), dtype=np.float64)
    for i, element in enumerate(STYLE_ELEMENTS):
        sides = []
        for column in STYLE_COLUMNS[element]:
            values = table.values(column)
            bad = ~np.isfinite(values) | (values < 0)
            if bad.any():
                _, row = _first_bad(table, bad)
                raise EngineError(
                    f"row {row}: {column} must be a non-negative count",
                    column=column,
                    row=row,
                )
            sides.append(values)
        np.divide(sides[0] - sides[1], sides[0] + sides[1] + 1.0, out=out[i])
    return out, STYLE_ELEMENTS


def _independent_rows(features: FloatArray, tol: float = 1e-8) -> NDArray[np.bool_]:
    """Which z-scored feature rows to keep so that none is a linear function of earlier ones.

    Row j is dropped when its variance left after regressing it on the kept rows before it
    is below ``tol`` (of 1); its coefficient is then not identified. Small arenas, where a few
    answer styles repeat, hit this.
    """
    return independent_in_gram(features @ features.T / features.shape[1], tol)


def independent_in_gram(gram: FloatArray, tol: float = 1e-8) -> NDArray[np.bool_]:
    """``_independent_rows`` from the z-scored features' mean products ``F F^T / n``."""
    kept: list[int] = []
    for j in range(gram.shape[0]):
        left = gram[j, j]
        if kept:
            cross = gram[kept, j]
            left -= float(cross @ np.linalg.solve(gram[np.ix_(kept, kept)], cross))
        if left > tol:
            kept.append(j)
    mask = np.zeros(gram.shape[0], dtype=bool)
    mask[kept] = True
    return mask


def encode(
    source: pd.DataFrame | BattleTable,
    *,
    style_control: bool,
    reweight: bool,
    min_pair_count: int = 50,
    position: bool = False,
    propensity: Propensity | None = None,
) -> Battles:
    """Validate ``df`` and build the pair-sorted arrays.

    Reweighting follows arena-rank: each battle of the unordered pair {a, b} gets weight
    ``1 / max(count{a, b}, 50)``. With ``propensity`` each battle of {a, b} is also weighted
    by ``1 / propensity[a, b]`` (inverse-propensity weighting: a pair the sampler drew twice
    as often counts half as much per battle). The product is normalised so the weights
    average 1 over the battles. ``position`` appends the position covariate (``POSITION``).
    """
    table = as_table(source)
    _require_columns(table, ("model_a", "model_b", "winner"))
    n = len(table)
    if n == 0:
        raise CannotRateError("no battles to rate")
    models, a, b = _encode_models(table)
    if len(models) < 2:
        raise EngineError("at least 2 models are needed to rate, found " + str(len(models)))
    y = encode_outcomes(table)
    p = len(models)
    # The smallest integer type keeps the stable argsort a radix sort.
    code_type = np.int16 if p * p < 2**15 else np.int32 if p * p < 2**31 else np.int64
    pair_code = (a * p + b).astype(code_type)

    features: FloatArray | None = None
    names: tuple[str, ...] = ()
    degenerate: tuple[str, ...] = ()
    if style_control:
        raw, names = style_differences(table)
        std = raw.std(axis=1)
        varies = std > 0
        features = raw[varies] if not varies.all() else raw
        features -= features.mean(axis=1)[:, None]
        features /= std[varies][:, None]
        independent = _independent_rows(features)
        if not independent.all():
            features = features[independent]
        kept = iter(independent)
        keep = [bool(v) and bool(next(kept)) for v in varies]
        degenerate = tuple(nm for nm, k in zip(names, keep, strict=True) if not k)
        names = tuple(nm for nm, k in zip(names, keep, strict=True) if k)

    if features is None:
        # Identical (a, b, outcome) battles share a row; the likelihood only sees their count.
        y_code = (y * 2).astype(np.int64)  # 0, 1, 2
        counts = np.bincount(pair_code.astype(np.int64) * 3 + y_code, minlength=p * p * 3)
        return battles_from_counts(
            models,
            counts.astype(np.float64),
            reweight=reweight,
            min_pair_count=min_pair_count,
            position=position,
            propensity=propensity,
            file_a=a,
            file_b=b,
            file_y=y,
        )
    order = np.argsort(pair_code, kind="stable")
    return _pair_sorted(
        models,
        pair_code[order].astype(np.int64),
        y[order],
        np.ones(n, dtype=np.float64),
        np.take(features, order, axis=1),
        names,
        degenerate,
        reweight=reweight,
        min_pair_count=min_pair_count,
        position=position,
        propensity=propensity,
        file_a=a,
        file_b=b,
        file_y=y,
    )


def battles_from_counts(
    models: list[str],
    counts: FloatArray,
    *,
    reweight: bool,
    min_pair_count: int = 50,
    position: bool = False,
    propensity: Propensity | None = None,
    file_a: IntArray | None = None,
    file_b: IntArray | None = None,
    file_y: FloatArray | None = None,
) -> Battles:
    """Grouped ``Battles`` (no style features) from battle counts indexed by
    ``(a * p + b) * 3 + 2 * y`` (what ``encode`` builds without style control).

    Without the per-battle ``file_*`` arrays (the online Elo's input) they are left empty.
    """
    group = np.flatnonzero(counts)
    empty = np.zeros(0, dtype=np.int64)
    return _pair_sorted(
        models,
        group // 3,
        (group % 3).astype(np.float64) / 2.0,
        counts[group].astype(np.float64),
        None,
        (),
        (),
        reweight=reweight,
        min_pair_count=min_pair_count,
        position=position,
        propensity=propensity,
        file_a=empty if file_a is None else file_a,
        file_b=empty if file_b is None else file_b,
        file_y=np.zeros(0) if file_y is None else file_y,
        n=int(round(float(counts.sum()))),
    )


def _pair_sorted(
    models: list[str],
    codes_sorted: IntArray,
    row_y: FloatArray,
    mult: FloatArray,
    features: FloatArray | None,
    names: tuple[str, ...],
    degenerate: tuple[str, ...],
    *,
    reweight: bool,
    min_pair_count: int,
    position: bool,
    propensity: Propensity | None,
    file_a: IntArray,
    file_b: IntArray,
    file_y: FloatArray,
    n: int | None = None,
) -> Battles:
    """``Battles`` from rows sorted by pair code ``a * p + b``."""
    p = len(models)
    n = len(file_y) if n is None else n
    boundary = np.empty(len(codes_sorted), dtype=bool)
    boundary[0] = True
    np.not_equal(codes_sorted[1:], codes_sorted[:-1], out=boundary[1:])
    starts = np.flatnonzero(boundary).astype(np.int64)
    row_pair = (np.cumsum(boundary) - 1).astype(np.int64)
    present = codes_sorted[starts]
    pair_a = present // p
    pair_b = present % p

    pair_weight: FloatArray | None = None
    if reweight or propensity is not None:
        battles_per_pair = np.add.reduceat(mult, starts)
        w = np.ones(len(pair_a))
        if reweight:
            unordered = np.minimum(pair_a, pair_b) * p + np.maximum(pair_a, pair_b)
            per_unordered = np.bincount(unordered, battles_per_pair, minlength=p * p)[unordered]
            w /= np.maximum(per_unordered, float(min_pair_count))
        if propensity is not None:
            w /= pair_propensities(models, pair_a, pair_b, propensity)
        pair_weight = w / (np.dot(w, battles_per_pair) / n)
    if position:
        ones = np.ones((1, len(row_y)))
        features = ones if features is None else np.ascontiguousarray(np.vstack([features, ones]))
        names = (*names, POSITION)

    return Battles(
        models=models,
        pair_a=pair_a,
        pair_b=pair_b,
        starts=starts,
        row_pair=row_pair,
        y=np.ascontiguousarray(row_y),
        mult=mult,
        pair_weight=pair_weight,
        features=features,
        feature_names=names,
        degenerate=degenerate,
        n_battles=n,
        file_a=file_a,
        file_b=file_b,
        file_y=file_y,
    )


def pair_propensities(
    models: list[str], pair_a: IntArray, pair_b: IntArray, propensity: Propensity
) -> FloatArray:
    """``propensity`` of each ordered pair (looked up in either order); a pair without a
    probability in (0, 1] raises ``EngineError`` naming it."""
    out = np.empty(len(pair_a))
    for i, (a, b) in enumerate(zip(pair_a.tolist(), pair_b.tolist(), strict=True)):
        names = (models[a], models[b])
        value = propensity.get(names, propensity.get((names[1], names[0])))
        if value is None or not (0.0 < float(value) <= 1.0):
            raise EngineError(
                f"pair {names[0]} / {names[1]} has no draw probability in (0, 1] "
                f"({value!r}): inverse-propensity weights need one for every pair",
                column="propensity",
            )
        out[i] = float(value)
    return out


def flatten_conv_metadata(df: pd.DataFrame, column: str = "conv_metadata") -> pd.DataFrame:
    """Return a copy of ``df`` with ``conv_metadata`` objects turned into the flat count columns.

    ``header_count_a`` becomes the sum of h1..h6, ``list_count_a`` of ordered + unordered,
    ``bold_count_a`` of ``**`` + ``__``; tokens are taken as they are. Objects may be dicts or
    JSON strings. A missing key names the row and the key.
    """
    import json

    _require_columns(as_table(df), (column,))
    flat: dict[str, list[int]] = {key: [] for key in CONV_METADATA_KEYS}
    for position, meta in enumerate(df[column].tolist()):
        if isinstance(meta, str):
            try:
                meta = json.loads(meta)
            except ValueError as exc:
                row = df.index[position]
                raise EngineError(
                    f"row {row}: {column} is not valid JSON", column=column, row=row
                ) from exc
        if not isinstance(meta, Mapping):
            row = df.index[position]
            raise EngineError(f"row {row}: {column} is not an object", column=column, row=row)
        for key, parts in CONV_METADATA_KEYS.items():
            try:
                value: Any = meta[key]
                flat[key].append(
                    int(value) if parts is None else int(sum(value[part] for part in parts))
                )
            except (KeyError, TypeError, ValueError) as exc:
                row = df.index[position]
                raise EngineError(
                    f"row {row}: {column}.{key} is missing or not a count",
                    column=f"{column}.{key}",
                    row=row,
                ) from exc
    out = df.drop(columns=[column])
    for key, values in flat.items():
        out[key] = np.asarray(values, dtype=np.int64)
    return out
