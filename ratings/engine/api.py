"""``rate``: a battle table in, a ``RatingResult`` out (``to_dict()`` for JSON).

Why one module: ``rate`` is the engine's entry point, and the scale, the result's rows and the
option checks here are applied in the order ``rate`` calls them; the streamed fit
(``ratings.engine.stream``) imports the same scale and rows from here, so both paths share them.
Ranks, rank spreads and tiers are ``ratings.engine.ranks``'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from . import bt, fragility
from .data import (
    STYLE_ELEMENTS,
    Battles,
    BattleTable,
    FloatArray,
    Propensity,
    as_table,
    encode,
    without_features,
)
from .elo import online_elo
from .errors import CannotRateError, EngineError
from .fragility import Fragility
from .identify import Identification, identify
from .provisional import Provisional
from .ranks import leaderboard_positions
from .ranks import leaderboard_ranks as leaderboard_ranks  # re-exported: callers import it here
from .ranks import upper_bound_ranks as upper_bound_ranks
from .result import Centre, Matrices, Method, ModelRating, PositionEffect, RatingResult

if TYPE_CHECKING:
    import pandas as pd

#: Elo points per logit: ratings are 400 log10-odds, as on LMArena.
ELO_PER_LOGIT = 400.0 / math.log(10.0)
CENTRE = 1000.0
Z_95 = 1.959963984540054  # standard normal 97.5% quantile


BoolArray = npt.NDArray[np.bool_]


def rating_transform(weights: FloatArray) -> FloatArray:
    """The identifying map ``T = I - 1 w^T`` from fitted logits to rating logits.

    Bradley-Terry logits are identified only up to a common shift; ``T theta`` is the one
    representative with ``w . (T theta) = 0`` when ``w`` sums to 1. ``w = 1/p`` everywhere
    centres on the mean of every rated model; ``w = 1/|S|`` on a subset ``S`` (0 elsewhere)
    on the mean of ``S``; ``w = e_a`` pins model ``a`` at 0. Intervals are transformed by the
    same map: the covariance is ``T Sigma T^T`` and each bootstrap replicate is ``T theta*``.
    """
    p = len(weights)
    return np.eye(p) - np.outer(np.ones(p), weights)


@dataclass(frozen=True)
class Scale:
    """Where the ratings' zero is: ``rating = offset + 400/ln 10 * (T theta)`` with
    ``T = rating_transform(weights)``; ``centre`` names the rule, ``warnings`` any fallback."""

    weights: FloatArray
    offset: float
    centre: Centre
    anchor: tuple[str, float] | None  # the anchor in use, None when centred on a mean
    preliminary: BoolArray
    warnings: tuple[str, ...]


def model_votes(battles: Battles) -> FloatArray:
    """Each model's battles in the fit (both sides), in ``battles.models`` order."""
    p = battles.n_models
    battles_per_pair, _ = bt.pair_totals(battles)
    votes = np.bincount(battles.pair_a, battles_per_pair, p) + np.bincount(
        battles.pair_b, battles_per_pair, p
    )
    return votes.astype(np.float64)


def rating_scale(
    battles: Battles,
    split: Identification,
    *,
    anchor: tuple[str, float] | None,
    established_min_votes: int,
    anchor_fallback: bool,
) -> Scale:
    """The identification of ``rate``: the anchor, else the mean of the established models,
    else (none established) the mean of every rated model.

    A model is preliminary below ``established_min_votes`` battles in the fit. An anchor that
    is missing, provisional or preliminary raises ``EngineError``, or with ``anchor_fallback``
    falls back to the established mean with a warning saying why.
    """
    models = battles.models
    votes = np.rint(model_votes(battles))
    preliminary = votes < established_min_votes
    warnings: list[str] = []
    if anchor is not None:
        problem = _anchor_problem(anchor[0], models, split, votes, established_min_votes)
        if problem is None:
            weights = np.zeros(len(models))
            weights[models.index(anchor[0])] = 1.0
            return Scale(weights, float(anchor[1]), "anchor", anchor, preliminary, ())
        if not anchor_fallback:
            raise EngineError(problem)
        warnings.append(f"{problem}: the scale is centred on the established models instead")
    established = ~preliminary
    if established.any():
        weights = established / established.sum()
        return Scale(weights, CENTRE, "established", None, preliminary, tuple(warnings))
    warnings.append(
        f"no model has {established_min_votes} rated votes yet: the scale is centred on "
        "every rated model"
    )
    weights = np.full(len(models), 1.0 / len(models))
    return Scale(weights, CENTRE, "all", None, preliminary, tuple(warnings))


def _anchor_problem(
    name: str, models: list[str], split: Identification, votes: FloatArray, min_votes: int
) -> str | None:
    """Why ``name`` cannot anchor the scale, or None when it can."""
    if name not in models:
        reason = next((e.reason for e in split.provisional if e.model == name), None)
        if reason is not None:
            return f"anchor model {name!r} is provisional ({reason})"
        return f"anchor model {name!r} has no battles"
    n = int(votes[models.index(name)])
    if n < min_votes:
        return f"anchor model {name!r} is preliminary ({n} rated votes, {min_votes} needed)"
    return None


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
    established_min_votes: int = 0,
    anchor_fallback: bool = False,
    position: bool = False,
    propensity: Propensity | None = None,
    fragility_top: int = 0,
    fragility_among: Collection[str] | None = None,
) -> RatingResult:
    """Bradley-Terry ratings (optionally style-controlled) with 95% intervals, as a
    ``RatingResult`` (``result.to_dict()`` is its JSON form; see ``result``).

    ``df`` has ``model_a``, ``model_b``, ``winner`` and, with ``style_control``, the flat count
    columns of ``data.STYLE_COLUMNS`` (a ``BattleTable`` with the same columns also works).
    Ratings are ``1000 + 400/ln 10 * (theta - mean_S theta)``, the mean over the set ``S`` of
    *established* models (at least ``established_min_votes`` battles in the fit; every rated
    model when none is, and with the default 0), or, with an anchor,
    ``anchor_rating + 400/ln 10 * (theta - theta_anchor)`` (the anchor's interval is then
    zero-width; see ``rating_scale`` for an anchor that cannot serve, and ``anchor_fallback``).
    Centring on ``S`` keeps a model's rating still when only votes not involving it arrive
    from models outside ``S``: a newcomer's extreme first votes move its own rating, not the
    scale. Intervals go through the same linear map (``rating_transform``). Models outside
    ``S`` are ``preliminary``: listed in rating order after the established ones and never
    ranked above them (``leaderboard_ranks``). See ``bt`` for the model, the convergence criterion and the interval
    estimators. Style coefficients are in logits per standard deviation of the z-scored
    feature; an element that never varies or is collinear with earlier ones is ``None``.
    ``matrices.predicted_win_probability`` is ``sigma(theta_i - theta_j)``, i.e. for answers of
    equal style. ``with_online_elo=False`` skips the sequential Elo replay (~1 s per 1M battles).
    ``workers`` is the bootstrap's thread count (default ``min(2, os.cpu_count())``; results do
    not depend on it).

    ``position`` adds a covariate that is 1 for every battle: side A (``model_a``) is the
    answer shown on the left, so its coefficient (``result.position``) is the log-odds
    advantage of the left side for two models of equal rating and style; ``None`` there when
    the data cannot tell it from the ratings (every pair met in one orientation only).
    ``propensity`` maps each pair of model names (either order; every pair in ``df``) to the
    probability that the sampler drew that pair; each battle then counts ``1 / probability`` times (normalised to
    average 1; combined with ``reweight`` by product), so pairs the sampler favoured do not
    dominate the fit. Intervals are then the weighted fit's sandwich (HC0) or bootstrap.
    ``fragility_top`` > 0 adds ``result.fragility``: for the adjacent pairs among the first
    ``fragility_top`` established models in rating order (those in ``fragility_among`` when
    given, e.g. the shown ones), the fewest votes found whose removal, or whose flip, swaps the
    pair, each verified by a refit of this same model (``fragility.audit``).

    Only the models where maximum-likelihood ratings exist are rated: the largest strongly
    connected component of the "scored against" graph, fitted with the battles among its
    members alone, exactly as if the other battles were not there (see ``identify`` for the
    rule and its tie-breaks). ``provisional`` lists every other model as a ``Provisional``
    with its whole record and a reason in ``no_losses``, ``no_wins``, ``not_connected``. ``n_battles`` counts the battles
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
            established_min_votes=established_min_votes,
            anchor_fallback=anchor_fallback,
            position=position,
            propensity=propensity,
            fragility_top=fragility_top,
            fragility_among=fragility_among,
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
    position: bool,
    propensity: Propensity | None,
) -> Battles:
    """The battles among rated models, encoded afresh (style z-scores and weights included)."""
    keep = split.rated_mask[battles.file_a] & split.rated_mask[battles.file_b]
    return encode(
        table.take(np.flatnonzero(keep)),
        style_control=style_control,
        reweight=reweight,
        position=position,
        propensity=propensity,
    )


@dataclass(frozen=True)
class _Fit:
    """The point estimate and the 95% intervals, on the identified logit scale."""

    theta: FloatArray  # identified model logits, in ``battles.models`` order
    lower: FloatArray
    upper: FloatArray
    beta: FloatArray  # style coefficients (then the position's), ``battles.feature_names`` order
    beta_lower: FloatArray
    beta_upper: FloatArray
    beta_se: FloatArray  # sandwich standard errors, or the bootstrap replicates' deviations
    logits: FloatArray  # the fitted (unidentified) model logits, for predicted win rates
    iterations: int
    gradient_max_norm: float
    full: bt.Fit | None = None  # the fit itself, for the fragility audit


def _check_options(
    ci: str, rounds: int, style_l2: float, workers: int | None, established_min_votes: int = 0
) -> None:
    if ci not in ("sandwich", "bootstrap"):
        raise EngineError(f"ci must be 'sandwich' or 'bootstrap', not {ci!r}")
    if ci == "bootstrap" and rounds < 2:
        raise EngineError("bootstrap needs at least 2 rounds")
    if style_l2 < 0:
        raise EngineError("style_l2 must be non-negative")
    if workers is not None and workers < 1:
        raise EngineError(f"workers must be at least 1, not {workers}")
    if established_min_votes < 0:
        raise EngineError(
            f"established_min_votes must be non-negative, not {established_min_votes}"
        )


def _ratable_battles(
    df: pd.DataFrame | BattleTable,
    *,
    style_control: bool,
    reweight: bool,
    position: bool = False,
    propensity: Propensity | None = None,
) -> tuple[Battles, int, Identification]:
    """The battles among the rated set, the number of battles given, and the split."""
    table = as_table(df)
    battles = encode(
        table,
        style_control=style_control,
        reweight=reweight,
        position=position,
        propensity=propensity,
    )
    n_input = battles.n_battles
    split = identify(battles)
    if not split.ratable:
        raise CannotRateError(split.reason_text(), split.provisional)
    if not split.everyone_rated:
        battles = _restricted(
            table,
            battles,
            split,
            style_control=style_control,
            reweight=reweight,
            position=position,
            propensity=propensity,
        )
    return battles, n_input, split


def _identified_rows(battles: Battles, style_l2: float) -> tuple[Battles, bt.Rows]:
    """The fit's rows, without the style elements the data cannot identify."""
    rows = bt.rows_from_battles(battles, style_l2)
    if rows.features is not None:
        identified = bt.identified_features(rows)
        if not identified.all():
            battles = without_features(battles, identified)
            rows = bt.rows_from_battles(battles, style_l2)
    return battles, rows


def _fit(
    battles: Battles,
    rows: bt.Rows,
    *,
    weights: FloatArray,
    ci: str,
    rounds: int,
    seed: int,
    progress: Callable[[int, int], None] | None,
    workers: int | None,
) -> _Fit:
    """Fit, then the intervals: sandwich (one fit) or percentile bootstrap (``rounds`` refits)."""
    p = battles.n_models
    if progress is not None:
        progress(0, rounds if ci == "bootstrap" else 1)
    start = None
    if rows.features is not None:
        coarse = bt.fit(bt.pair_rows(rows))
        start = np.concatenate([coarse.theta, np.zeros(rows.k)])
    result = bt.fit(rows, theta0=start)
    if ci == "sandwich":
        fit = _sandwich_fit(result, bt.sandwich(rows, result), p, weights)
        if progress is not None:
            progress(1, 1)
        return fit
    transform = rating_transform(weights)
    samples, boot_iterations = bt.bootstrap(
        rows, battles, result, rounds=rounds, seed=seed, progress=progress, workers=workers
    )
    boot_theta = samples[:, :p] @ transform.T
    lower, upper = np.percentile(boot_theta, [2.5, 97.5], axis=0)
    beta_lower, beta_upper = np.percentile(samples[:, p:], [2.5, 97.5], axis=0)
    return _Fit(
        theta=transform @ result.theta[:p],
        lower=lower,
        upper=upper,
        beta=result.theta[p:],
        beta_lower=beta_lower,
        beta_upper=beta_upper,
        beta_se=samples[:, p:].std(axis=0, ddof=1),
        logits=result.theta[:p],
        iterations=result.iterations + boot_iterations,
        gradient_max_norm=result.gradient_max_norm,
        full=result,
    )


def _sandwich_fit(result: bt.Fit, cov: FloatArray, p: int, weights: FloatArray) -> _Fit:
    """The ratings and 95% sandwich intervals of a fit whose robust covariance is ``cov``
    (``bt.sandwich``'s in memory, ``bt.robust_covariance``'s from a streamed fit)."""
    transform = rating_transform(weights)
    theta = transform @ result.theta[:p]
    beta = result.theta[p:]
    se = np.sqrt(np.maximum(np.diag(transform @ cov[:p, :p] @ transform.T), 0.0))
    beta_se = np.sqrt(np.maximum(np.diag(cov)[p:], 0.0))
    return _Fit(
        theta=theta,
        lower=theta - Z_95 * se,
        upper=theta + Z_95 * se,
        beta=beta,
        beta_lower=beta - Z_95 * beta_se,
        beta_upper=beta + Z_95 * beta_se,
        beta_se=beta_se,
        logits=result.theta[:p],
        iterations=result.iterations,
        gradient_max_norm=result.gradient_max_norm,
        full=result,
    )


def _model_ratings(
    battles: Battles, fit: _Fit, scale: Scale
) -> tuple[list[int], tuple[ModelRating, ...]]:
    """Leaderboard order (established first, then rating down, then name) and each model's
    rating, rank, rank spread, tier, votes and whether it is preliminary (``ranks``)."""
    models = battles.models
    p = battles.n_models
    offset = scale.offset
    rating = offset + ELO_PER_LOGIT * fit.theta
    rating_lower = offset + ELO_PER_LOGIT * fit.lower
    rating_upper = offset + ELO_PER_LOGIT * fit.upper
    preliminary = scale.preliminary
    votes = model_votes(battles)
    order = sorted(range(p), key=lambda i: (bool(preliminary[i]), -rating[i], models[i]))
    o = np.asarray(order, dtype=np.int64)
    # In leaderboard order, so that equal ratings are tiered by name.
    at = leaderboard_positions(rating[o], rating_lower[o], rating_upper[o], preliminary[o])
    rated = tuple(
        ModelRating(
            model=models[i],
            rating=float(rating[i]),
            rating_lower=float(rating_lower[i]),
            rating_upper=float(rating_upper[i]),
            rank=int(at.rank[k]),
            votes=int(round(votes[i])),
            preliminary=bool(preliminary[i]),
            rank_worst=int(at.rank_worst[k]),
            tier=int(at.tier[k]) or None,
        )
        for k, i in enumerate(order)
    )
    return order, rated


def _matrices(battles: Battles, order: list[int], logits: FloatArray) -> Matrices:
    """Battle counts, observed and predicted win fractions between rated models, in ``order``."""
    p = battles.n_models
    battles_per_pair, points = bt.pair_totals(battles)
    counts = np.zeros((p, p))
    np.add.at(counts, (battles.pair_a, battles.pair_b), battles_per_pair)
    won = np.zeros((p, p))
    np.add.at(won, (battles.pair_a, battles.pair_b), points)
    won_sym = won + (counts - won).T  # i's points against j, from either side
    counts_sym = counts + counts.T
    o = np.asarray(order)
    counts_o = counts_sym[np.ix_(o, o)]
    frac_o = won_sym[np.ix_(o, o)]
    logit = logits[o]
    predicted = 1.0 / (1.0 + np.exp(-(logit[:, None] - logit[None, :])))
    return Matrices(
        models=tuple(battles.models[i] for i in order),
        battle_counts=tuple(tuple(row) for row in np.rint(counts_o).astype(np.int64).tolist()),
        win_fraction=tuple(
            tuple(None if c == 0 else w / c for w, c in zip(wr, cr, strict=True))
            for wr, cr in zip(frac_o.tolist(), counts_o.tolist(), strict=True)
        ),
        predicted_win_probability=tuple(tuple(row) for row in predicted.tolist()),
    )


def _style(
    battles: Battles, fit: _Fit
) -> tuple[dict[str, float | None], dict[str, tuple[float, float] | None]]:
    """Every style element's coefficient and interval; ``None`` for those not estimated."""
    coefficients: dict[str, float | None] = dict.fromkeys(STYLE_ELEMENTS)
    intervals: dict[str, tuple[float, float] | None] = dict.fromkeys(STYLE_ELEMENTS)
    for j, name in enumerate(battles.feature_names):
        if name in coefficients:
            coefficients[name] = float(fit.beta[j])
            intervals[name] = (float(fit.beta_lower[j]), float(fit.beta_upper[j]))
    return coefficients, intervals


def _position(battles: Battles, fit: _Fit, *, asked: bool) -> PositionEffect | None:
    """The left side's coefficient, or ``None`` without the option; its fields are ``None``
    when the option was on but the data could not identify it."""
    if not asked:
        return None
    if not battles.position:
        return PositionEffect(None, None, None, None)
    return PositionEffect(
        coefficient=float(fit.beta[-1]),
        standard_error=float(fit.beta_se[-1]),
        lower=float(fit.beta_lower[-1]),
        upper=float(fit.beta_upper[-1]),
    )


def _ranked(battles: Battles, fit: _Fit, scale: Scale, among: Collection[str] | None) -> list[int]:
    """The established models (of ``among`` when given) in rating order, best first."""
    keep = [
        i
        for i, name in enumerate(battles.models)
        if not scale.preliminary[i] and (among is None or name in among)
    ]
    return sorted(keep, key=lambda i: (-float(fit.theta[i]), battles.models[i]))


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
    established_min_votes: int,
    anchor_fallback: bool,
    position: bool,
    propensity: Propensity | None,
    fragility_top: int = 0,
    fragility_among: Collection[str] | None = None,
) -> RatingResult:
    _check_options(ci, rounds, style_l2, workers, established_min_votes)
    if fragility_top < 0:
        raise EngineError(f"fragility_top must be non-negative, not {fragility_top}")
    battles, n_input, split = _ratable_battles(
        df,
        style_control=style_control,
        reweight=reweight,
        position=position,
        propensity=propensity,
    )
    scale = rating_scale(
        battles,
        split,
        anchor=anchor,
        established_min_votes=established_min_votes,
        anchor_fallback=anchor_fallback,
    )
    battles, rows = _identified_rows(battles, style_l2)
    fit = _fit(
        battles,
        rows,
        weights=scale.weights,
        ci=ci,
        rounds=rounds,
        seed=seed,
        progress=progress,
        workers=workers,
    )
    audit = None
    if fragility_top and fit.full is not None:
        audit = fragility.audit(
            battles,
            rows,
            fit.full,
            _ranked(battles, fit, scale, fragility_among),
            top=fragility_top,
            points_per_logit=ELO_PER_LOGIT,
        )
    return _result(
        battles,
        fit,
        fragility=audit,
        provisional=split.provisional,
        n_input=n_input,
        style_control=style_control,
        ci=ci,
        rounds=rounds,
        seed=seed,
        scale=scale,
        established_min_votes=established_min_votes,
        reweight=reweight,
        style_l2=style_l2,
        with_online_elo=with_online_elo,
        position=position,
        inverse_propensity=propensity is not None,
    )


def _result(
    battles: Battles,
    fit: _Fit,
    *,
    provisional: tuple[Provisional, ...],
    n_input: int,
    style_control: bool,
    ci: str,
    rounds: int | None,
    seed: int | None,
    scale: Scale,
    established_min_votes: int,
    reweight: bool,
    style_l2: float,
    with_online_elo: bool,
    position: bool = False,
    inverse_propensity: bool = False,
    fragility: Fragility | None = None,
) -> RatingResult:
    """The ``RatingResult`` of a fit (``rate``'s and ``rate_parquet``'s)."""
    anchor = scale.anchor
    order, rated = _model_ratings(battles, fit, scale)
    coefficients, intervals = _style(battles, fit) if style_control else (None, None)
    elo: dict[str, float] | None = None
    if with_online_elo:
        values = online_elo(battles.file_a, battles.file_b, battles.file_y, battles.n_models)
        elo = {battles.models[i]: float(values[i]) for i in order}
    bootstrap = ci == "bootstrap"
    return RatingResult(
        models=rated,
        provisional=provisional,
        style_coefficients=coefficients,
        style_intervals=intervals,
        n_battles=battles.n_battles,
        n_battles_input=n_input,
        method=Method(
            style_control=style_control,
            ci=ci,
            rounds=rounds if bootstrap else None,
            seed=seed if bootstrap else None,
            anchor=None if anchor is None else (anchor[0], float(anchor[1])),
            reweight=reweight,
            style_l2=style_l2,
            iterations=fit.iterations,
            gradient_max_norm=fit.gradient_max_norm,
            degenerate_style_elements=tuple(battles.degenerate),
            centre=scale.centre,
            established_min_votes=established_min_votes,
            warnings=scale.warnings,
            position=position,
            inverse_propensity=inverse_propensity,
        ),
        matrices=_matrices(battles, order, fit.logits),
        online_elo=elo,
        position=_position(battles, fit, asked=position),
        fragility=fragility,
    )
