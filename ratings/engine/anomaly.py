"""Anomalous voters, after the Chatbot Arena paper (Chiang et al. 2024, section 5.1).

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


def _outcomes(model_a: pd.Series, model_b: pd.Series, winner: pd.Series) -> np.ndarray:
    swapped = (model_a > model_b).to_numpy()
    a_wins = (winner == "model_a").to_numpy()
    b_wins = (winner == "model_b").to_numpy()
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
    model_a = votes["model_a"].astype(str)
    model_b = votes["model_b"].astype(str)
    first = np.where(model_a <= model_b, model_a, model_b)
    second = np.where(model_a <= model_b, model_b, model_a)
    outcome = _outcomes(model_a, model_b, votes["winner"].astype(str))
    pair_code = pd.factorize(pd.Series(first) + "\x00" + pd.Series(second))[0]
    voter_code = pd.factorize(votes["voter"].astype(str))[0]
    n_pairs = int(pair_code.max()) + 1
    one_hot = np.zeros((len(votes), _OUTCOMES))
    one_hot[np.arange(len(votes)), outcome] = 1.0
    # Counts per pair, and per (voter, pair): the leave-one-voter-out counts are the difference.
    per_pair = np.zeros((n_pairs, _OUTCOMES))
    np.add.at(per_pair, pair_code, one_hot)
    voter_pair = voter_code.astype(np.int64) * n_pairs + pair_code
    key, inverse = np.unique(voter_pair, return_inverse=True)
    per_voter_pair = np.zeros((len(key), _OUTCOMES))
    np.add.at(per_voter_pair, inverse, one_hot)
    others = per_pair[pair_code] - per_voter_pair[inverse] + 1.0  # add-one prior
    rates = others / others.sum(axis=1, keepdims=True)
    observed = rates[np.arange(len(votes)), outcome]
    at_most = rates <= observed[:, None] * (1 + _RATE_TOLERANCE)
    p_values: np.ndarray = np.minimum((rates * at_most).sum(axis=1), 1.0)
    return p_values


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
    grouped = pd.DataFrame({"voter": per_vote["voter"], "log_p": log_p}).groupby(
        "voter", sort=True
    )["log_p"]
    voters = pd.DataFrame({"n_votes": grouped.size(), "statistic": -2.0 * grouped.sum()})
    voters = voters.reset_index()
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
