"""``rate``: a battle table in, a JSON-serialisable leaderboard out."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import threadpool_limits

from . import bt
from .data import (
    STYLE_ELEMENTS,
    Battles,
    BattleTable,
    FloatArray,
    as_table,
    encode,
    without_features,
)
from .elo import online_elo
from .errors import CannotRateError, EngineError
from .identify import Identification, identify

if TYPE_CHECKING:
    import pandas as pd

#: Elo points per logit: ratings are 400 log10-odds, as on LMArena.
ELO_PER_LOGIT = 400.0 / math.log(10.0)
CENTRE = 1000.0
Z_95 = 1.959963984540054  # standard normal 97.5% quantile


def _rating_transform(p: int, anchor_index: int | None) -> FloatArray:
    """Linear map from fitted logits to identified ones: centred on the mean, or pinned."""
    t = np.eye(p)
    if anchor_index is None:
        t -= 1.0 / p
        return t
    t[:, anchor_index] -= 1.0
    return t


def upper_bound_ranks(lower: FloatArray, upper: FloatArray) -> list[int]:
    """Rank = 1 + the number of models whose lower bound is above this model's upper bound."""
    return [int(1 + np.sum(lower > u)) for u in upper]


def rate(
    df: pd.DataFrame | BattleTable,
    *,
    style_control: bool = True,
    ci: str = "sandwich",
    rounds: int = 100,
    seed: int = 0,
    anchor: tuple[str, float] | None = None,
    reweight: bool = False,
    style_l2: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
    with_online_elo: bool = True,
    workers: int | None = None,
) -> dict[str, Any]:
    """Bradley-Terry ratings (optionally style-controlled) with 95% intervals.

    ``df`` has ``model_a``, ``model_b``, ``winner`` and, with ``style_control``, the flat count
    columns of ``data.STYLE_COLUMNS`` (a ``BattleTable`` with the same columns also works).
    Ratings are ``1000 + 400/ln 10 * (theta - mean theta)``, or, with an anchor,
    ``anchor_rating + 400/ln 10 * (theta - theta_anchor)`` (the anchor's interval is then
    zero-width). See ``bt`` for the model, the convergence criterion and the interval
    estimators. Style coefficients are in logits per standard deviation of the z-scored
    feature; an element that never varies or is collinear with earlier ones is ``None``.
    ``matrices.predicted_win_probability`` is ``sigma(theta_i - theta_j)``, i.e. for answers of
    equal style. ``with_online_elo=False`` skips the sequential Elo replay (~1 s per 1M battles).
    ``workers`` is the bootstrap's thread count (default ``min(2, os.cpu_count())``; results do
    not depend on it).

    Only the models where maximum-likelihood ratings exist are rated: the largest strongly
    connected component of the "scored against" graph, fitted with the battles among its
    members alone, exactly as if the other battles were not there (see ``identify`` for the
    rule and its tie-breaks). ``provisional`` lists every other model as
    ``{"model", "battles", "wins", "losses", "ties", "reason"}`` with its whole record and a
    reason in ``no_losses``, ``no_wins``, ``not_connected``. ``n_battles`` counts the battles
    used by the fit (those among rated models), ``n_battles_input`` every battle given; a rated
    model's ``votes`` count its battles in the fit. Fewer than two ratable models raise
    ``CannotRateError`` whose ``provisional`` lists every model.
    """
    # The engine's BLAS calls are small (p x p solves, k x n products with k = 4): on few cores,
    # waking and spinning OpenBLAS's threads after each call made a bootstrap replicate 2-3x
    # slower in bench/ratings.py, so BLAS runs single-threaded for the fit.
    with threadpool_limits(limits=1, user_api="blas"):
        return _rate(
            df,
            style_control=style_control,
            ci=ci,
            rounds=rounds,
            seed=seed,
            anchor=anchor,
            reweight=reweight,
            style_l2=style_l2,
            progress=progress,
            with_online_elo=with_online_elo,
            workers=workers,
        )


def identify_table(df: pd.DataFrame | BattleTable) -> Identification:
    """Which models ``rate`` would rate and which it would list as provisional, and every
    model's record, without fitting (style counts are not needed; see ``identify``).

    An empty table raises ``CannotRateError``.
    """
    battles = encode(as_table(df), style_control=False, reweight=False)
    return identify(battles, with_records=True)


def _restricted(
    table: BattleTable,
    battles: Battles,
    split: Identification,
    *,
    style_control: bool,
    reweight: bool,
) -> Battles:
    """The battles among rated models, encoded afresh (style z-scores and weights included)."""
    keep = split.rated_mask[battles.file_a] & split.rated_mask[battles.file_b]
    return encode(table.take(np.flatnonzero(keep)), style_control=style_control, reweight=reweight)


def _rate(
    df: pd.DataFrame | BattleTable,
    *,
    style_control: bool,
    ci: str,
    rounds: int,
    seed: int,
    anchor: tuple[str, float] | None,
    reweight: bool,
    style_l2: float,
    progress: Callable[[int, int], None] | None,
    with_online_elo: bool,
    workers: int | None,
) -> dict[str, Any]:
    if ci not in ("sandwich", "bootstrap"):
        raise EngineError(f"ci must be 'sandwich' or 'bootstrap', not {ci!r}")
    if ci == "bootstrap" and rounds < 2:
        raise EngineError("bootstrap needs at least 2 rounds")
    if style_l2 < 0:
        raise EngineError("style_l2 must be non-negative")
    if workers is not None and workers < 1:
        raise EngineError(f"workers must be at least 1, not {workers}")
    table = as_table(df)
    battles = encode(table, style_control=style_control, reweight=reweight)
    n_input = battles.n_battles
    split = identify(battles)
    if not split.ratable:
        raise CannotRateError(split.reason_text(), split.provisional)
    if not split.everyone_rated:
        battles = _restricted(table, battles, split, style_control=style_control, reweight=reweight)
    models = battles.models
    p = battles.n_models
    anchor_index: int | None = None
    if anchor is not None:
        if anchor[0] not in models:
            reason = next((e.reason for e in split.provisional if e.model == anchor[0]), None)
            if reason is not None:
                raise EngineError(f"anchor model {anchor[0]!r} is provisional ({reason})")
            raise EngineError(f"anchor model {anchor[0]!r} has no battles")
        anchor_index = models.index(anchor[0])
    total = rounds if ci == "bootstrap" else 1
    if progress is not None:
        progress(0, total)

    rows = bt.rows_from_battles(battles, style_l2)
    if rows.features is not None:
        identified = bt.identified_features(rows)
        if not identified.all():
            battles = without_features(battles, identified)
            rows = bt.rows_from_battles(battles, style_l2)
    start = None
    if rows.features is not None:
        coarse = bt.fit(bt.pair_rows(rows))
        start = np.concatenate([coarse.theta, np.zeros(rows.k)])
    result = bt.fit(rows, theta0=start)
    transform = _rating_transform(p, anchor_index)
    offset = CENTRE if anchor is None else float(anchor[1])
    theta = transform @ result.theta[:p]
    beta = result.theta[p:]
    iterations = result.iterations

    if ci == "sandwich":
        cov = bt.sandwich(rows, result)
        se = np.sqrt(np.maximum(np.diag(transform @ cov[:p, :p] @ transform.T), 0.0))
        lower, upper = theta - Z_95 * se, theta + Z_95 * se
        beta_se = np.sqrt(np.maximum(np.diag(cov)[p:], 0.0))
        beta_lower, beta_upper = beta - Z_95 * beta_se, beta + Z_95 * beta_se
        if progress is not None:
            progress(1, 1)
    else:
        samples, boot_iterations = bt.bootstrap(
            rows, battles, result, rounds=rounds, seed=seed, progress=progress, workers=workers
        )
        iterations += boot_iterations
        boot_theta = samples[:, :p] @ transform.T
        lower, upper = np.percentile(boot_theta, [2.5, 97.5], axis=0)
        beta_lower, beta_upper = np.percentile(samples[:, p:], [2.5, 97.5], axis=0)

    rating = offset + ELO_PER_LOGIT * theta
    rating_lower = offset + ELO_PER_LOGIT * lower
    rating_upper = offset + ELO_PER_LOGIT * upper
    ranks = upper_bound_ranks(rating_lower, rating_upper)
    battles_per_pair, points = bt.pair_totals(battles)
    votes = np.bincount(battles.pair_a, battles_per_pair, p) + np.bincount(
        battles.pair_b, battles_per_pair, p
    )
    order = sorted(range(p), key=lambda i: (-rating[i], models[i]))

    counts = np.zeros((p, p))
    np.add.at(counts, (battles.pair_a, battles.pair_b), battles_per_pair)
    won = np.zeros((p, p))
    np.add.at(won, (battles.pair_a, battles.pair_b), points)
    won_sym = won + (counts - won).T  # i's points against j, from either side
    counts_sym = counts + counts.T
    o = np.asarray(order)
    counts_o = counts_sym[np.ix_(o, o)]
    frac_o = won_sym[np.ix_(o, o)]
    logit = result.theta[:p][o]
    predicted = 1.0 / (1.0 + np.exp(-(logit[:, None] - logit[None, :])))

    coefficients: dict[str, float | None] | None = None
    intervals: dict[str, list[float] | None] | None = None
    if style_control:
        coefficients = dict.fromkeys(STYLE_ELEMENTS)
        intervals = dict.fromkeys(STYLE_ELEMENTS)
        for j, name in enumerate(battles.feature_names):
            coefficients[name] = float(beta[j])
            intervals[name] = [float(beta_lower[j]), float(beta_upper[j])]

    elo: dict[str, float] | None = None
    if with_online_elo:
        values = online_elo(battles.file_a, battles.file_b, battles.file_y, p)
        elo = {models[i]: float(values[i]) for i in order}

    return {
        "models": [
            {
                "model": models[i],
                "rating": float(rating[i]),
                "rating_lower": float(rating_lower[i]),
                "rating_upper": float(rating_upper[i]),
                "rank": ranks[i],
                "votes": int(round(votes[i])),
            }
            for i in order
        ],
        "style_coefficients": coefficients,
        "style_coefficient_intervals": intervals,
        "n_battles": battles.n_battles,
        "n_battles_input": n_input,
        "provisional": [entry.as_dict() for entry in split.provisional],
        "method": {
            "style_control": style_control,
            "ci": ci,
            "rounds": rounds if ci == "bootstrap" else None,
            "seed": seed if ci == "bootstrap" else None,
            "anchor": None if anchor is None else {"model": anchor[0], "rating": float(anchor[1])},
            "reweight": reweight,
            "style_l2": style_l2,
            "iterations": iterations,
            "gradient_max_norm": result.gradient_max_norm,
            "degenerate_style_elements": list(battles.degenerate),
            "scale": "400/ln(10) Elo points per logit",
        },
        "matrices": {
            "models": [models[i] for i in order],
            "battle_counts": np.rint(counts_o).astype(np.int64).tolist(),
            "win_fraction": [
                [None if c == 0 else w / c for w, c in zip(wr, cr, strict=True)]
                for wr, cr in zip(frac_o.tolist(), counts_o.tolist(), strict=True)
            ],
            "predicted_win_probability": predicted.tolist(),
        },
        "online_elo": elo,
    }
