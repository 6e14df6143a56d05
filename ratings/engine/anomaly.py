"""Anomalous voters, after the Chatbot Arena paper (Chiang et al. 2024, section 5.1).

Why one module: the per-vote test, Fisher's combination and the per-model and fitted variants
share the outcome encoding and the expectations; each is a few functions over the same arrays,
following one section of one paper.

Each vote is tested against what everybody else said about the same pair of models. For a vote
by voter ``u`` on the pair {m1, m2}, the three outcomes (the first model of the pair in
alphabetical order wins, the second wins, a tie; "both bad" counts as a tie) have rates estimated
from the other voters' votes on that pair, leave-one-voter-out, with one pseudo-vote per outcome
(add-one prior) so that a pair nobody else judged gives every outcome a third. The vote's p-value
is the probability, under those rates, of an outcome at most as likely as the observed one.

A voter's p-values are combined with Fisher's method: ``-2 sum(ln p)`` follows a chi-squared
law with ``2k`` degrees of freedom for ``k`` independent votes when the voter behaves like the
crowd. The p-values of a discrete law are conservative (``P(p <= t) <= t``), so the combined
p-value of an honest voter is, if anything, too large: flags err towards honest voters.

A voter with fewer than ``min_votes`` tested votes gets no combined p-value (too few to tell).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

# Outcome codes, relative to the pair's alphabetical order.
FIRST_WINS, SECOND_WINS, TIE = 0, 1, 2
_OUTCOMES = 3
# Relative slack when comparing two outcome probabilities ("at most as likely").
_RATE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class AnomalyResult:
    """Per vote (``votes``: the input's index, with ``p_value``) and per voter (``voters``:
    ``voter``, ``n_votes``, ``statistic``, ``p_value``; NaN below the minimum count)."""

    votes: pd.DataFrame
    voters: pd.DataFrame


def _codes(*columns: pd.Series) -> tuple[list[np.ndarray], np.ndarray]:
    """Integer codes of the columns' values read as text (``astype(str)``), over one vocabulary
    of distinct texts sorted as Python sorts strings, so that codes compare as the texts do;
    and that vocabulary. A categorical column is read through its categories, with no string
    per row: the trust computations pass 1M votes as categoricals."""
    vocabularies, local = [], []
    for column in columns:
        if isinstance(column.dtype, pd.CategoricalDtype) and not column.isna().any():
            codes = np.asarray(column.cat.codes, dtype=np.int64)
            words = [str(c) for c in column.cat.categories]
        else:
            codes, uniques = pd.factorize(column.astype(str), use_na_sentinel=False)
            codes = np.asarray(codes, dtype=np.int64)
            words = [str(u) for u in uniques]
        local.append(codes)
        vocabularies.append(np.array(words, dtype=object))
    every = np.concatenate([np.empty(0, dtype=object), *vocabularies])
    vocabulary, inverse = np.unique(every, return_inverse=True)
    out, start = [], 0
    for codes, words_ in zip(local, vocabularies, strict=True):
        out.append(np.asarray(inverse[start : start + len(words_)], dtype=np.int64)[codes])
        start += len(words_)
    return out, np.asarray(vocabulary, dtype=object)


def _outcomes(swapped: np.ndarray, winner: pd.Series) -> np.ndarray:
    """Each vote's outcome code from the pair's side (``swapped``: model A's name sorts after
    model B's)."""
    (code,), words = _codes(winner)
    a_wins = (words == "model_a")[code]
    b_wins = (words == "model_b")[code]
    outcome = np.full(len(winner), TIE, dtype=np.int64)
    outcome[a_wins] = np.where(swapped[a_wins], SECOND_WINS, FIRST_WINS)
    outcome[b_wins] = np.where(swapped[b_wins], FIRST_WINS, SECOND_WINS)
    return outcome


def vote_p_values(votes: pd.DataFrame) -> np.ndarray:
    """The p-value of each vote against the other voters' outcome rates on its pair.

    ``votes`` has the columns ``voter``, ``model_a``, ``model_b`` and ``winner`` ("model_a",
    "model_b", "tie", "tie (bothbad)"); one float per row, in row order.
    """
    if votes.empty:
        return np.empty(0)
    (model_a, model_b), models = _codes(votes["model_a"], votes["model_b"])
    first, second = np.minimum(model_a, model_b), np.maximum(model_a, model_b)
    outcome = _outcomes(model_a > model_b, votes["winner"])
    pair_code = np.unique(first * len(models) + second, return_inverse=True)[1].reshape(-1)
    (voter_code,), _ = _codes(votes["voter"])
    n_pairs = int(pair_code.max()) + 1
    # Counts per pair, and per (voter, pair): the leave-one-voter-out counts are the difference.
    per_pair = _outcome_counts(pair_code, outcome, n_pairs)
    voter_pair = voter_code * n_pairs + pair_code
    key, inverse = np.unique(voter_pair, return_inverse=True)
    per_voter_pair = _outcome_counts(inverse.reshape(-1), outcome, len(key))
    # In place: (n, 3) floats per step at 1M votes.
    rates = per_pair[pair_code]
    rates -= per_voter_pair[inverse]
    rates += 1.0  # add-one prior
    rates /= rates.sum(axis=1, keepdims=True)
    observed = rates[np.arange(len(votes)), outcome]
    at_most = rates <= observed[:, None] * (1 + _RATE_TOLERANCE)
    p_values: np.ndarray = np.minimum((rates * at_most).sum(axis=1), 1.0)
    return p_values


def _outcome_counts(group: np.ndarray, outcome: np.ndarray, n_groups: int) -> np.ndarray:
    """(n_groups, 3): each group's votes of each outcome."""
    return np.stack(
        [np.bincount(group, weights=outcome == k, minlength=n_groups) for k in range(_OUTCOMES)],
        axis=1,
    )


def fisher_log_sf(statistic: np.ndarray, n_votes: np.ndarray) -> np.ndarray:
    """ln P(X >= statistic) for X chi-squared with ``2 n_votes`` degrees of freedom."""
    # scipy.stats is imported when voters are tested, not with the module: ratings.tasks imports
    # it, and scipy.stats adds over a second to the start-up of every process that loads tasks.
    from scipy.stats import chi2

    return np.asarray(chi2.logsf(statistic, 2 * n_votes), dtype=float)


def voters_anomaly(votes: pd.DataFrame, *, min_votes: int = 10) -> AnomalyResult:
    """Each vote's p-value and each voter's combined (Fisher) p-value; see the module's text."""
    p_values = vote_p_values(votes)
    per_vote = pd.DataFrame({"voter": votes["voter"].astype(str), "p_value": p_values})
    per_vote.index = votes.index
    if per_vote.empty:
        empty = pd.DataFrame(
            {
                "voter": pd.Series(dtype=str),
                "n_votes": pd.Series(dtype=np.int64),
                "statistic": pd.Series(dtype=float),
                "p_value": pd.Series(dtype=float),
            }
        )
        return AnomalyResult(votes=per_vote, voters=empty)
    # p > 0 always (the prior gives every outcome a positive rate), so the log is finite.
    log_p = np.log(np.clip(per_vote["p_value"].to_numpy(), np.finfo(float).tiny, 1.0))
    # Per voter, in the voters' text order.
    (code,), names = _codes(votes["voter"])
    n_votes = np.bincount(code, minlength=len(names))
    total = np.bincount(code, weights=log_p, minlength=len(names))
    seen = n_votes > 0
    voters = pd.DataFrame(
        {"voter": names[seen], "n_votes": n_votes[seen], "statistic": -2.0 * total[seen]}
    )
    enough = voters["n_votes"].to_numpy() >= min_votes
    combined = np.full(len(voters), np.nan)
    combined[enough] = np.exp(
        fisher_log_sf(voters["statistic"].to_numpy()[enough], voters["n_votes"].to_numpy()[enough])
    )
    voters["p_value"] = combined
    return AnomalyResult(votes=per_vote, voters=voters)


def voters_flagged(result: AnomalyResult, *, threshold: float) -> pd.DataFrame:
    """The voters whose combined p-value is below ``threshold``, most anomalous first."""
    voters = result.voters
    flagged = voters[voters["p_value"].notna() & (voters["p_value"] < threshold)]
    return flagged.sort_values(["p_value", "voter"]).reset_index(drop=True)


# --- Model-based tests ----------------------------------------------------------------------
#
# The crowd test above needs other voters on the same pair; a scripted voter who mostly meets
# pairs nobody else judged passes it. The tests below compare each vote with what the fitted
# Bradley-Terry model predicts instead, so every vote between two rated models informs:
#
#     p_i = P(a_i beats b_i) = expit(theta[a_i] - theta[b_i] + beta . z_i)
#
# with ``theta`` the fitted logits, ``beta`` the fitted style coefficients and ``z_i`` the
# battle's z-scored style differences (zero where the vote has no style counts). The vote's score
# from A's side is ``y_i`` (1, 0.5 for a tie of either kind, 0) and its residual ``r_i = y_i - p_i``.
# ``Var(y_i) <= p_i (1 - p_i)`` whatever the tie rate (``y^2 <= y`` on [0, 1]), so standardising by
# ``p_i (1 - p_i)`` errs towards honest voters. The expectations come from one fit of every tested
# vote, the voter's own included, which pulls them towards the voter: conservative again.


@dataclass(frozen=True)
class Expectations:
    """Each vote's ``p_a`` (P(model A beats model B) under the fit, NaN where either model is
    not rated) and ``design`` (shape (1 + k, n): the fitted linear predictor, then the k z-scored
    style differences), in row order."""

    p_a: np.ndarray
    design: np.ndarray


def model_expectations(
    model_a: pd.Series,
    model_b: pd.Series,
    *,
    logits: dict[str, float],
    style: np.ndarray | None = None,
    coefficients: np.ndarray | None = None,
) -> Expectations:
    """``p_a`` and ``design`` for the votes (see the section's text); ``style`` (k, n) holds the
    z-scored style differences (NaN where a vote has none: counted as 0), ``coefficients`` (k,)."""
    (code_a, code_b), names = _codes(model_a, model_b)
    theta = np.array([logits.get(name, np.nan) for name in names], dtype=float)
    theta_a, theta_b = theta[code_a], theta[code_b]
    eta = theta_a - theta_b
    z = np.zeros((0, len(eta)))
    if style is not None and coefficients is not None and len(coefficients):
        z = np.nan_to_num(np.asarray(style, dtype=float), nan=0.0)
        eta = eta + np.asarray(coefficients, dtype=float) @ z
    p_a = 1.0 / (1.0 + np.exp(-eta))
    return Expectations(p_a=p_a, design=np.vstack([eta[None, :], z]))


def _scores(winner: pd.Series) -> np.ndarray:
    (code,), words = _codes(winner)
    scores = np.array([OUTCOME_SCORES.get(w, np.nan) for w in words], dtype=float)
    per_vote: np.ndarray = scores[code]
    return per_vote


#: A vote's score from model A's side; ties of either kind are half a win (as in the fit).
OUTCOME_SCORES = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}


def voter_model_test(
    votes: pd.DataFrame, expectations: Expectations, *, min_votes: int = 10
) -> pd.DataFrame:
    """Does a voter's record favour (or disfavour) one model beyond what the fit predicts?

    For voter ``u`` and model ``m``, over ``u``'s battles with ``m`` on either side, with
    ``y_i``, ``p_i`` the score and fitted win probability from ``m``'s side, the voter's own
    shift ``delta`` of ``m``'s logit (``logit q_i = logit p_i + delta``) is tested against 0 by
    its likelihood ratio (ties count as half a win, as in the fit):

        LR_um = 2 sum [y_i ln(q_i / p_i) + (1 - y_i) ln((1 - q_i) / (1 - p_i))]  at delta-hat

    ``delta-hat`` by Newton's method (``|delta| <= 30``; a record of only wins has
    ``LR = -2 sum ln p_i``). ``LR`` is referred to chi-squared with one degree of freedom. The
    score test ``sum (y_i - p_i) / sqrt(sum p_i (1 - p_i))`` it replaces understates extreme
    records: 20 wins in 20 at p = 0.45 have an exact two-sided p-value of 2.3e-7, 2.4e-6 by the
    score's normal tail with continuity correction, 1.6e-8 by the likelihood ratio. So at the
    extreme the ratio overstates, but an honest voter seldom reaches it: in 100,000 simulated
    honest cells of 10, 20 and 50 votes (p uniform on [0.2, 0.8], 10% ties) the share below
    1e-3 was 0.07%, 0.06%, 0.05% and below 1e-4 0.005%, 0.003%, 0.002%, under the nominal rate
    (ties make a score's variance smaller than ``p (1 - p)``). P-values for the (voter, model) cells
    with at least ``min_votes`` battles; the voter's p-value is Bonferroni's over them:
    ``min(1, M_u min_m p_um)``. One row per voter with a tested cell: ``voter``, ``n_models``
    (M_u), ``model`` (the most anomalous), ``z`` (``sign(delta-hat) sqrt(LR)``), ``p_value``.
    """
    from scipy.stats import chi2

    p = expectations.p_a
    known = np.isfinite(p)
    y = _scores(votes["winner"])
    known &= np.isfinite(y)
    (voter_code,), voter_names = _codes(votes["voter"])
    (code_a, code_b), model_names = _codes(votes["model_a"], votes["model_b"])
    # Each vote is two cells, (voter, model A) and (voter, model B): the second half of each
    # array is the votes seen from side B.
    pk, yk = p[known], y[known]
    prob = np.clip(np.concatenate([pk, 1.0 - pk]), 1e-12, 1.0 - 1e-12)
    score = np.concatenate([yk, 1.0 - yk])
    width = max(len(model_names), 1)
    voter = voter_code[known] * width
    key, every, n = np.unique(
        np.concatenate([voter + code_a[known], voter + code_b[known]]),
        return_inverse=True,
        return_counts=True,
    )
    every = every.reshape(-1)
    del voter, voter_code, code_a, code_b, pk, yk
    v = np.bincount(every, weights=prob * (1.0 - prob), minlength=len(key))
    # Only the cells with enough battles are reported: the likelihood ratio is computed for
    # them alone (each cell's fit is its own).
    kept = (n >= min_votes) & (v > 0)
    rows = kept[every]
    codes = (np.cumsum(kept) - 1)[every[rows]]
    n_cells = int(kept.sum())
    prob, score = prob[rows], score[rows]
    eta = np.log(prob) - np.log1p(-prob)
    # Newton's method on each cell's concave one-parameter likelihood, until every step is
    # below 1e-10 logits (or 60 steps; a record of only wins walks to the +-30 bound).
    delta = np.zeros(n_cells)
    for _ in range(60):
        q = 1.0 / (1.0 + np.exp(-(eta + delta[codes])))
        g = np.bincount(codes, weights=score - q, minlength=n_cells)
        h = np.bincount(codes, weights=q * (1.0 - q), minlength=n_cells)
        moved = np.clip(delta + g / np.maximum(h, 1e-12), -30.0, 30.0)
        converged = np.abs(moved - delta).max(initial=0.0) < 1e-10
        delta = moved
        if converged:
            break
    q = np.clip(1.0 / (1.0 + np.exp(-(eta + delta[codes]))), 1e-300, 1.0)
    q_not = np.clip(1.0 / (1.0 + np.exp(eta + delta[codes])), 1e-300, 1.0)
    terms = score * (np.log(q) - np.log(prob)) + (1.0 - score) * (np.log(q_not) - np.log1p(-prob))
    lr = np.maximum(2.0 * np.bincount(codes, weights=terms, minlength=n_cells), 0.0)
    cells = pd.DataFrame(
        {
            "voter": voter_names[key[kept] // width],
            "model": model_names[key[kept] % width],
            "n": n[kept],
            "s": delta,
            "v": v[kept],
            "lr": lr,
        }
    )
    columns = ["voter", "n_models", "model", "z", "p_value"]
    if cells.empty:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c in ("voter", "model") else float) for c in columns}
        )
    stat = cells["lr"].to_numpy()
    cells["z"] = np.sign(cells["s"].to_numpy()) * np.sqrt(stat)
    cells["p"] = chi2.sf(stat, 1)
    cells = cells.sort_values(["voter", "p", "model"])
    best = cells.groupby("voter", sort=True).head(1).set_index("voter")
    n_models = cells.groupby("voter", sort=True).size()
    out = pd.DataFrame(
        {
            "n_models": n_models,
            "model": best["model"],
            "z": best["z"],
            "p_value": np.minimum(1.0, n_models * best["p"]),
        }
    )
    return out.reset_index()[columns]


def voter_fit_test(
    votes: pd.DataFrame, expectations: Expectations, *, min_votes: int = 10
) -> pd.DataFrame:
    """Do a voter's votes follow the fitted model: the same weight on the rating difference and
    on each style difference as everybody's fit?

    The score test of ``gamma = 0`` in the voter's own model ``logit P(a wins) = eta_i +
    gamma . x_i``, ``x_i`` the columns of ``expectations.design`` (the fitted linear predictor
    and the z-scored style differences): with ``S_u = sum x_i r_i`` and ``I_u = sum p_i (1 - p_i)
    x_i x_i^T`` over the voter's votes,

        T_u = S_u^T I_u^+ S_u  ~  chi-squared with rank(I_u) degrees of freedom.

    A voter who always picks the shorter answer has residuals that fall with the length
    difference (the style direction); one who votes at random or against the ratings, residuals
    that fall with ``eta`` (the rating direction). One row per voter with at least ``min_votes``
    votes between rated models: ``voter``, ``n_votes``, ``statistic``, ``df``, ``p_value``.
    """
    from scipy.stats import chi2

    p = expectations.p_a
    y = _scores(votes["winner"])
    known = np.isfinite(p) & np.isfinite(y)
    (voter_code,), voter_names = _codes(votes["voter"])
    # Voters in the order of their first vote between rated models.
    codes, uniques = pd.factorize(voter_code[known])
    n_voters = len(uniques)
    columns = ["voter", "n_votes", "statistic", "df", "p_value"]
    counts = np.bincount(codes, minlength=n_voters)
    enough = counts >= min_votes
    if not enough.any():
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c == "voter" else float) for c in columns}
        )
    # The sums over the votes of the voters with enough of them, one bincount per entry.
    rows = np.flatnonzero(known)[enough[codes]]
    group = (np.cumsum(enough) - 1)[codes[enough[codes]]]
    n_tested = int(enough.sum())
    x = expectations.design[:, rows].T  # (n, d)
    r = (y - p)[rows]
    w = (p * (1.0 - p))[rows]
    d = x.shape[1]
    score = np.stack(
        [np.bincount(group, weights=x[:, i] * r, minlength=n_tested) for i in range(d)], axis=1
    )
    information = np.empty((n_tested, d, d))
    for i in range(d):
        wx = w * x[:, i]
        for j in range(d):
            information[:, i, j] = np.bincount(group, weights=wx * x[:, j], minlength=n_tested)
    # Scale-free rank: an element a voter's battles never vary in adds no degree of freedom.
    scale = np.sqrt(np.maximum(np.einsum("vii->vi", information), 0.0))
    scale[scale == 0] = 1.0
    unit = information / scale[:, :, None] / scale[:, None, :]
    inverse = np.linalg.pinv(unit, rcond=1e-8, hermitian=True)
    scaled = score / scale
    statistic = np.einsum("vi,vij,vj->v", scaled, inverse, scaled)
    df = np.linalg.matrix_rank(unit, tol=1e-8, hermitian=True)
    p_value = np.where(df > 0, chi2.sf(statistic, np.maximum(df, 1)), 1.0)
    return pd.DataFrame(
        {
            "voter": voter_names[np.asarray(uniques)[enough]],
            "n_votes": counts[enough],
            "statistic": statistic,
            "df": df,
            "p_value": p_value,
        }
    )[columns]


#: The tests a voter meets, in the order their p-values are reported.
TESTS = ("crowd", "model", "fit")


def voters_combined(crowd: pd.DataFrame, model: pd.DataFrame, fit: pd.DataFrame) -> pd.DataFrame:
    """One p-value per voter from the three tests, by Bonferroni's rule:

        p_u = min(1, T_u min_t p_ut)

    over the ``T_u`` tests that gave the voter a p-value, so that a threshold on ``p_u`` bounds
    an honest voter's chance of a flag as a threshold on one test's p-value does. The crowd
    test's rows (``voter``, ``n_votes``, ``statistic``) lead, with ``p_crowd``, ``p_model``,
    ``p_fit`` (NaN: not tested), ``test`` (the smallest one's name) and ``p_value``.
    """
    out = crowd.rename(columns={"p_value": "p_crowd"}).set_index("voter")
    out["p_model"] = model.set_index("voter")["p_value"] if len(model) else np.nan
    out["p_fit"] = fit.set_index("voter")["p_value"] if len(fit) else np.nan
    ps = out[["p_crowd", "p_model", "p_fit"]].to_numpy(dtype=float)
    tested = np.isfinite(ps).sum(axis=1)
    masked = np.where(np.isfinite(ps), ps, np.inf)  # a test not taken never is the smallest
    first = masked.argmin(axis=1)
    smallest = np.where(tested > 0, masked[np.arange(len(ps)), first], np.nan)
    out["test"] = [TESTS[int(i)] if t else "" for i, t in zip(first, tested, strict=True)]
    out["p_value"] = np.where(tested > 0, np.minimum(1.0, tested * smallest), np.nan)
    return out.reset_index()


def fitted_expectations(
    votes: pd.DataFrame,
    *,
    style_complete: np.ndarray | None = None,
    fit_rows: np.ndarray | None = None,
) -> Expectations:
    """The expectations of ``votes`` (``model_a``, ``model_b``, ``winner``) under the arena's
    Bradley-Terry fit of the same votes (``rate``, sandwich intervals, no online Elo).

    With ``style_complete`` (one bool per row; those rows carry the flat style counts of
    ``STYLE_COLUMNS``), the fit is style-controlled over those rows, and each of them gets the
    fit's coefficients applied to its style differences, z-scored as the fit z-scores them
    (mean and population standard deviation over the fitted rows); the other rows get the
    fitted ratings alone. ``fit_rows`` (one bool per row) fits only the rows it marks and
    gives every row its expectation under that fit. Votes whose models the fit cannot rate get
    NaN; so does every vote when no fit is possible (too few votes or models).
    """
    from .api import ELO_PER_LOGIT, rate
    from .data import STYLE_ELEMENTS, style_differences
    from .errors import EngineError

    n = len(votes)
    nothing = Expectations(p_a=np.full(n, np.nan), design=np.full((1, n), np.nan))
    core = votes[["model_a", "model_b", "winner"]].reset_index(drop=True)
    styled = (
        np.zeros(n, dtype=bool)
        if style_complete is None
        else np.asarray(style_complete, dtype=bool)
    )
    fitting = np.ones(n, dtype=bool) if fit_rows is None else np.asarray(fit_rows, dtype=bool)
    try:
        if (styled & fitting).any():
            fitted = votes.reset_index(drop=True)[styled & fitting]
            result = rate(fitted, style_control=True, ci="sandwich", with_online_elo=False)
        else:
            result = rate(core[fitting], style_control=False, ci="sandwich", with_online_elo=False)
    except EngineError:
        return nothing
    logits = {m.model: m.rating / ELO_PER_LOGIT for m in result.models}
    coefficients = result.style_coefficients or {}
    names = [e for e in STYLE_ELEMENTS if coefficients.get(e) is not None]
    if not names:
        return model_expectations(core["model_a"], core["model_b"], logits=logits)
    raw, elements = style_differences(votes.reset_index(drop=True)[styled])
    rows = [elements.index(e) for e in names]
    raw = raw[rows]
    rated = (
        core.loc[styled, "model_a"].isin(logits.keys())
        & core.loc[styled, "model_b"].isin(logits.keys())
    ).to_numpy() & fitting[styled]
    mean = raw[:, rated].mean(axis=1)
    std = raw[:, rated].std(axis=1)
    z = np.full((len(names), n), np.nan)
    z[:, styled] = (raw - mean[:, None]) / np.where(std > 0, std, 1.0)[:, None]
    beta = np.array([coefficients[e] for e in names], dtype=float)
    return model_expectations(
        core["model_a"], core["model_b"], logits=logits, style=z, coefficients=beta
    )


def expectations_filled(primary: Expectations, fallback: Expectations) -> Expectations:
    """``primary`` where it has an expectation, ``fallback``'s probability and linear
    predictor for the votes it has none for (a fit of fewer votes may leave a model unrated
    that a fuller fit rates); the style differences stay ``primary``'s. Same rows in both."""
    missing = ~np.isfinite(primary.p_a) & np.isfinite(fallback.p_a)
    if not missing.any():
        return primary
    p_a = np.where(missing, fallback.p_a, primary.p_a)
    design = primary.design.copy()
    design[0] = np.where(missing, fallback.design[0], primary.design[0])
    return Expectations(p_a=p_a, design=design)


def voter_sources(
    sessions: pd.DataFrame, *, window_seconds: float, min_sessions: int = 2
) -> pd.Series:
    """Sessions that look like one source: the same address hash and user-agent class, each
    first vote within ``window_seconds`` of the previous session's first vote in that group
    (a chain, sorted by first vote). ``sessions``: ``voter``, ``ip_hash``, ``user_agent_class``,
    ``first_vote`` (seconds, any origin). Returns, for each voter in a source of at least
    ``min_sessions`` sessions, its source's label (``source:<ip_hash>:<ua>:<n>``); sessions
    without an address hash form no source.
    """
    frame = sessions[sessions["ip_hash"].astype(str) != ""].sort_values(
        ["ip_hash", "user_agent_class", "first_vote", "voter"]
    )
    if frame.empty:
        return pd.Series(dtype=str)
    key = frame["ip_hash"].astype(str) + ":" + frame["user_agent_class"].astype(str)
    new_group = (key != key.shift()).to_numpy()
    gap = frame["first_vote"].diff().to_numpy()
    starts = new_group | ~(gap <= window_seconds)
    number = np.cumsum(starts)
    label = "source:" + key.to_numpy().astype(object) + ":" + number.astype(str).astype(object)
    out = pd.Series(label, index=frame["voter"].astype(str).to_numpy())
    size = out.map(out.value_counts())
    return out[size >= min_sessions]


# --- Held-out expectations -------------------------------------------------------------------
#
# The fit behind the expectations includes the tested voter's own votes. A voter with many votes
# on one model pulls that model's fitted rating towards its own verdicts, and then its record
# looks as the fit predicts: 50 votes for a model from one source, against 80 honest ones, lift
# the fitted rating so far that the voter x model test no longer sees them. So each tested group
# (a session or a source) is judged against the models' ratings *without* its votes,
# approximated by one Newton step from the full fit (Cook's distance takes the same step): with
# ``theta`` the models' logits (one reference model fixed at 0), each vote's design ``x_i`` (+1
# at model A, -1 at model B), ``w_i = p_i (1 - p_i)``, ``r_i = y_i - p_i``, the information
# ``H = sum_i w_i x_i x_i^T`` and group ``u``'s share ``H_u``, ``g_u = sum_{i in u} x_i r_i``
# (the full fit's score is 0, so the other votes' score is ``-g_u``):
#
#     theta_{-u} = theta - (H - H_u)^-1 g_u,     eta_i^{-u} = eta_i - x_i . (H - H_u)^-1 g_u.
#
# The step is taken only in the models the other votes still inform (at least
# ``HELD_OUT_MIN_INFORMATION`` of information, about ten even votes); a model that the group
# (nearly) alone judged stays where the full fit put it, since one step from the full fit says
# nothing reliable about it. The style coefficients stay the full fit's: they are shared by
# every battle, and one voter's few answers with an unusual style would otherwise swing them.

HELD_OUT_MIN_INFORMATION = 2.5


def held_out_expectations(
    votes: pd.DataFrame,
    expectations: Expectations,
    *,
    min_votes: int = 10,
    fit_rows: np.ndarray | None = None,
    only: Collection[str] | None = None,
) -> Expectations:
    """``expectations`` with each vote of a voter holding at least ``min_votes`` votes between
    rated models replaced by its expectation under the models' ratings without that voter's
    votes (see the section's text). ``votes``: ``voter``, ``model_a``, ``model_b``, ``winner``
    in the rows' order. ``fit_rows`` marks the rows the expectations' fit was made from (all by
    default): the information is theirs, and a voter with a row outside them is left as it is
    (its votes are not all in the fit to be taken out). ``only``: the voters judged this way
    (all by default); every row informs the others' held-out ratings whatever ``only`` says.
    From ``_LOW_RANK_MIN_MODELS`` models, a voter whose votes leave the informed models and the
    reference as they are costs one k x k solve, k the models it met (``_LowRank``); any other
    one M x M pseudo-inverse for M models (``_held_out_steps``); both for blocks of voters at
    once.
    """
    p = np.asarray(expectations.p_a, dtype=float)
    y = _scores(votes["winner"])
    known = np.isfinite(p) & np.isfinite(y)
    if not known.any():
        return expectations
    rows = np.flatnonzero(known)
    (voter_code,), voter_names = _codes(votes["voter"])
    codes, uniques = pd.factorize(voter_code[rows])
    counts = np.bincount(codes)
    in_fit = np.ones(len(rows), dtype=bool) if fit_rows is None else np.asarray(fit_rows)[rows]
    outside = np.bincount(codes, weights=~in_fit, minlength=len(counts))
    judged = (counts >= min_votes) & (outside == 0)
    if only is not None:
        judged &= np.isin(voter_names[uniques], np.array(list(only), dtype=object))
    tested = np.flatnonzero(judged)
    if not len(tested):
        return expectations
    (code_a, code_b), _ = _codes(votes["model_a"], votes["model_b"])
    _, idx = np.unique(np.concatenate([code_a[rows], code_b[rows]]), return_inverse=True)
    idx = idx.reshape(-1)
    a, b = idx[: len(rows)], idx[len(rows) :]
    m = int(idx.max()) + 1
    pk = p[rows]
    w = pk * (1.0 - pk)
    r = y[rows] - pk
    # H over every model (the reference is chosen per group, among the informed models).
    information = np.zeros((m, m))
    wf = np.where(in_fit, w, 0.0)
    np.add.at(information, (a, a), wf)
    np.add.at(information, (b, b), wf)
    np.add.at(information, (a, b), -wf)
    np.add.at(information, (b, a), -wf)
    eta = expectations.design[0].astype(float).copy()
    position = np.full(len(counts), -1, dtype=np.int64)
    position[tested] = np.arange(len(tested))
    group = position[codes]  # each known row's tested group, -1 for none
    # The low-rank step where it is the same solution (``_LowRank``), the dense one elsewhere.
    low_rank = _LowRank.of(information)
    fast = np.zeros(len(tested), dtype=bool)
    if low_rank is not None:
        fast = low_rank.candidates(group, a, b, w, len(tested))
        fast[low_rank.apply(eta, rows, group, np.flatnonzero(fast), a, b, w, r)] = False
    dense = np.flatnonzero(~fast)
    for these, local, ids in _group_blocks(group, dense, np.full(len(dense), m * m)):
        step = _held_out_steps(information, local, a[these], b[these], w[these], r[these], len(ids))
        eta[rows[these]] -= step[local, a[these]] - step[local, b[these]]
    p_new = p.copy()
    p_new[rows] = 1.0 / (1.0 + np.exp(-eta[rows]))
    design = expectations.design.copy()
    design[0] = eta
    return Expectations(p_a=p_new, design=design)


#: Entries of the stacks (groups x width x width) ``held_out_expectations`` solves at once.
_HELD_OUT_BLOCK = 500_000


def _group_blocks(
    group: np.ndarray, chosen: np.ndarray, cost: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The rows of the groups ``chosen`` (``group``: each row's, -1 for none), a block of groups
    at a time in ``chosen``'s order: ``(rows, each row's group within the block, the block's
    groups)``, a group's rows in their order. ``cost``: each chosen group's entries, ascending;
    a block's groups times its largest cost stay within ``_HELD_OUT_BLOCK`` (or one group)."""
    if not len(chosen):
        return
    rank = np.full(int(group.max()) + 1, -1, dtype=np.int64)
    rank[chosen] = np.arange(len(chosen))
    ranked = np.where(group >= 0, rank[np.maximum(group, 0)], -1)
    mine = np.flatnonzero(ranked >= 0)
    mine = mine[np.argsort(ranked[mine], kind="stable")]
    bounds = np.searchsorted(ranked[mine], np.arange(len(chosen) + 1))
    lo = 0
    while lo < len(chosen):
        size = np.arange(1, len(chosen) - lo + 1) * np.asarray(cost[lo:], dtype=np.int64)
        hi = lo + max(1, int(np.searchsorted(size, _HELD_OUT_BLOCK, side="right")))
        these = mine[bounds[lo] : bounds[hi]]
        yield these, ranked[these] - lo, chosen[lo:hi]
        lo = hi


#: Below this many models the dense step is the cheaper per voter (about even at 16 on the
#: benchmark's synthetic voters of 20 votes, ``bench/trust.py``).
_LOW_RANK_MIN_MODELS = 16


class _LowRank:
    """The held-out step of a group whose votes leave the informed models and the reference as
    the whole information has them, solved in the models the group met.

    With ``F`` the informed models but the reference, ``A = H[F, F]``, ``S = A^-1``, and for the
    group ``B`` its information and ``g`` its score on the ``k`` models of ``F`` it met (``E``:
    those columns of the identity; ``K = E' S E``, k x k), Woodbury's identity gives

        (A - E B E')^-1 E g = S E (g + B (I - K B)^-1 K g),

    so the step on the group's models is ``K (g + B (I - K B)^-1 K g)``: a k x k solve per
    group whatever the number of models (the step on a model it did not meet moves none of its
    votes). It is ``lstsq``'s solution when ``A - E B E'`` has no singular value below 1e-8 of
    its largest. Its largest is at most ``lambda_max(A)``, and with ``rho`` the largest
    eigenvalue of ``K B`` (the share of ``A`` the group holds in its strongest direction),
    ``x' (A - E B E') x >= (1 - rho) x' A x``, so its smallest is at least
    ``(1 - rho) lambda_min(A)``: a group with ``(1 - rho) lambda_min(A) > 1e-8 lambda_max(A)``
    takes this step. One that fails that, or changes the informed set or the reference, takes
    the dense step (``_held_out_steps``)."""

    def __init__(self, information: np.ndarray, reference: int, informed: np.ndarray) -> None:
        self.diagonal = np.diag(information).copy()
        self.informed = informed
        self.reference = reference
        self.free = informed.copy()
        self.free[reference] = False
        block = information[np.ix_(self.free, self.free)]
        eigenvalues = np.linalg.eigvalsh(block)
        self.low, self.high = float(eigenvalues[0]), float(eigenvalues[-1])
        m = len(self.diagonal)
        # S over every model, 0 outside F, with a last row and column of 0 for padding.
        self.inverse = np.zeros((m + 1, m + 1))
        if self.low > 1e-8 * self.high:
            padded = np.append(self.free, False)
            self.inverse[np.ix_(padded, padded)] = np.linalg.inv(block)

    @classmethod
    def of(cls, information: np.ndarray) -> _LowRank | None:
        """The low-rank step of this information, or None where the dense one is the cheaper
        (fewer than ``_LOW_RANK_MIN_MODELS`` models) or there is nothing to solve."""
        diagonal = np.diag(information)
        informed = diagonal >= HELD_OUT_MIN_INFORMATION
        if len(diagonal) < _LOW_RANK_MIN_MODELS or informed.sum() < 2:
            return None
        reference = int(np.where(informed, diagonal, -np.inf).argmax())
        return cls(information, reference, informed)

    def candidates(
        self, group: np.ndarray, a: np.ndarray, b: np.ndarray, w: np.ndarray, n_groups: int
    ) -> np.ndarray:
        """The groups whose votes leave the informed models and the reference as they are."""
        out = np.zeros(n_groups, dtype=bool)
        if not self.low > 1e-8 * self.high:
            return out
        m = len(self.diagonal)
        every = np.arange(n_groups)
        for these, local, ids in _group_blocks(group, every, np.full(n_groups, m)):
            at = local * m
            own = np.bincount(at + a[these], weights=w[these], minlength=len(ids) * m)
            own += np.bincount(at + b[these], weights=w[these], minlength=len(ids) * m)
            own = own.reshape(len(ids), m)
            diagonal = self.diagonal[None, :] - own
            informed = diagonal >= HELD_OUT_MIN_INFORMATION
            same = (informed == self.informed[None, :]).all(axis=1)
            same &= np.where(informed, diagonal, -np.inf).argmax(axis=1) == self.reference
            out[ids] = same
        return out

    def _number(
        self, keys: np.ndarray, first: np.ndarray, owner: np.ndarray, models: np.ndarray
    ) -> np.ndarray:
        """Each row's model's number within its group's models of F (``keys``), -1 outside F."""
        if not len(keys):
            return np.full(len(models), -1, dtype=np.int64)
        key = owner * len(self.diagonal) + models
        at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
        found = self.free[models] & (keys[at] == key)
        return np.where(found, at - first[owner], -1)

    def apply(
        self,
        eta: np.ndarray,
        rows: np.ndarray,
        group: np.ndarray,
        chosen: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        w: np.ndarray,
        r: np.ndarray,
    ) -> np.ndarray:
        """Move ``eta`` of the ``chosen`` groups' votes by their held-out steps; the groups
        left for the dense step (``rho`` too close to 1, see the class's text)."""
        left: list[np.ndarray] = []
        if not len(chosen):
            return np.empty(0, dtype=np.int64)
        m = len(self.diagonal)
        # The (group, model of F) pairs the chosen groups met, by group then model: a group's
        # models are numbered from 0 in that order.
        size = int(group.max()) + 1
        member = np.zeros(size, dtype=bool)
        member[chosen] = True
        picked = np.flatnonzero((group >= 0) & member[np.maximum(group, 0)])
        sides = np.concatenate([group[picked] * m + a[picked], group[picked] * m + b[picked]])
        keys = np.unique(sides[self.free[sides % m]])
        first = np.zeros(size, dtype=np.int64)
        met = np.zeros(size, dtype=np.int64)
        first[chosen] = np.searchsorted(keys, chosen * m)
        met[chosen] = np.searchsorted(keys, chosen * m + m) - first[chosen]
        chosen = chosen[np.argsort(met[chosen], kind="stable")]  # blocks of similar widths
        for these, local, ids in _group_blocks(group, chosen, met[chosen] ** 2):
            n, width = len(ids), max(int(met[ids].max()), 1)
            owner = group[these]
            na, nb = (self._number(keys, first, owner, side[these]) for side in (a, b))
            weight, residual = w[these], r[these]
            cell = local * width
            score = np.zeros(n * width)
            own = np.zeros(n * width * width)
            for numbered, sign in ((na, 1.0), (nb, -1.0)):
                ok = numbered >= 0
                at = cell[ok] + numbered[ok]
                score += sign * np.bincount(at, residual[ok], n * width)
                own += np.bincount(at * width + numbered[ok], weight[ok], n * width * width)
            both = (na >= 0) & (nb >= 0)
            for one, other in ((na, nb), (nb, na)):
                at = (cell[both] + one[both]) * width + other[both]
                own -= np.bincount(at, weight[both], n * width * width)
            g = score.reshape(n, width)
            own_b = own.reshape(n, width, width)
            # Each group's models of F by number (m: padding, whose S row and column are 0).
            slots = np.full((n, width), m, dtype=np.int64)
            index = np.arange(width)[None, :]
            taken = index < met[ids][:, None]
            slots[taken] = keys[(first[ids][:, None] + index)[taken]] % m
            k_mat = self.inverse[slots[:, :, None], slots[:, None, :]]
            product = k_mat @ own_b
            rho = np.linalg.eigvals(product).real.max(axis=1)
            exact = (1.0 - rho) * self.low > 1e-8 * self.high
            left.append(ids[~exact])
            system = np.eye(width)[None, :, :] - product
            system[~exact] = np.eye(width)  # left to the dense step
            y = np.linalg.solve(system, (k_mat @ g[:, :, None]))
            x = (k_mat @ (g[:, :, None] + own_b @ y))[:, :, 0]
            x[~exact] = 0.0
            step_a = np.where(na >= 0, x[local, np.maximum(na, 0)], 0.0)
            step_b = np.where(nb >= 0, x[local, np.maximum(nb, 0)], 0.0)
            eta[rows[these]] -= step_a - step_b
        return np.concatenate(left)


def _held_out_steps(
    information: np.ndarray,
    group: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    n_groups: int,
) -> np.ndarray:
    """(n_groups, m): each group's step ``(H - H_u)^-1 g_u`` in the models the other votes
    inform (``HELD_OUT_MIN_INFORMATION``), one of them (the most informed) the reference held
    at 0, every other model 0; all zero for a group with fewer than two informed models.

    The least-squares solution of that system with singular values below 1e-8 of the largest
    cut (``lstsq``'s), for every group at once: each group's system is embedded in an m x m
    matrix whose other diagonal entries are its largest diagonal entry (never above its
    largest eigenvalue, so the cut is unchanged) and whose other right-hand entries are 0,
    and solved through its pseudo-inverse, computed for the whole stack."""
    m = information.shape[0]
    own = np.zeros(n_groups * m * m)
    for rows_at, cols_at, sign in ((a, a, 1.0), (b, b, 1.0), (a, b, -1.0), (b, a, -1.0)):
        own += sign * np.bincount(
            (group * m + rows_at) * m + cols_at, weights=w, minlength=n_groups * m * m
        )
    remaining = information[None, :, :] - own.reshape(n_groups, m, m)
    score = np.bincount(group * m + a, weights=r, minlength=n_groups * m) - np.bincount(
        group * m + b, weights=r, minlength=n_groups * m
    )
    score = score.reshape(n_groups, m)
    diagonal = np.einsum("gii->gi", remaining)
    informed = diagonal >= HELD_OUT_MIN_INFORMATION
    solvable = informed.sum(axis=1) >= 2
    reference = np.where(informed, diagonal, -np.inf).argmax(axis=1)
    free = informed.copy()
    free[np.arange(n_groups), reference] = False
    free &= solvable[:, None]
    system = remaining * free[:, :, None] * free[:, None, :]
    padding = np.where(free, diagonal, -np.inf).max(axis=1, initial=1.0)
    system[:, np.arange(m), np.arange(m)] += np.where(free, 0.0, padding[:, None])
    rhs = np.where(free, score, 0.0)
    step: np.ndarray = np.einsum(
        "gij,gj->gi", np.linalg.pinv(system, rcond=1e-8, hermitian=True), rhs
    )
    return np.where(free, step, 0.0)
