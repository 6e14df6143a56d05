"""Reward records of a trainer's group: counts and a Bradley-Terry score per completion.

After a vote on an environment battle, ``ratings.tasks.env_rewards_refresh`` refits the
battle's group (``environment.rewards.env_rewards_update`` reads the group's unflagged votes under
the submission's lock and stores what ``env_rewards_fit`` returns).

The fit: the engine's exact Bradley-Terry fit (``ratings.engine.rate``, no style control,
sandwich intervals) over the group's completions and the reference answers they met, where a
tie and a "both bad" vote are each half a win. Scores are on the Elo scale (400/ln 10 per
logit) with 0 the mean of the group's judged completions; ``score_low``/``score_high`` are the
engine's 95% interval moved by the same constant.

The prior: a small group rarely has a finite maximum-likelihood fit (a completion that only won
would have an infinite score, and the engine would leave it unrated). So each entrant (every
completion or reference with a counted vote) is given **one virtual tie against a virtual
"prior" entrant**. This is the weakest prior that makes every score finite (every entrant then
has half a win and half a loss against a common opponent, which also connects the group), it
pulls scores towards each other by about one vote's worth (in a group of two, one 1-0 vote
gives +131 and -131 rather than plus and minus infinity, ten give +/-290; with many votes it
fades), and it treats every entrant alike. The
prior entrant is not a completion: it is left out of the mean that sets 0. A completion with
no counted vote has a null score.

Counts: ``votes`` (counted, unflagged), ``wins``, ``losses``, ``ties`` ("tie" votes) and
``both_bad`` ("both bad" votes) of each completion.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter

import pandas as pd

from arena.models import Vote
from environment.rewards import RewardUpdate
from environment.selectors import COMPLETION_PREFIX, EnvGroup
from ratings.engine import CannotRateError, rate

logger = logging.getLogger(__name__)

PRIOR = "~prior"  # the virtual entrant; "~" sorts after every "c:" and "r:" key
_DIGITS = 6  # scores are rounded, so a refit on the same votes stores the same numbers


def _counts(group: EnvGroup) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {key: Counter() for key in group.completions}
    for vote in group.votes:
        for me, other_side in ((vote.model_a, "model_b"), (vote.model_b, "model_a")):
            if me not in counts:
                continue  # a reference answer: no record of its own
            record = counts[me]
            record["votes"] += 1
            if vote.winner == Vote.Winner.TIE:
                record["ties"] += 1
            elif vote.winner == Vote.Winner.BOTH_BAD:
                record["both_bad"] += 1
            elif vote.winner == other_side:
                record["losses"] += 1
            else:
                record["wins"] += 1
    return counts


def _scores(group: EnvGroup) -> dict[str, tuple[float, float, float]]:
    """Score and interval of each judged completion (see the module docstring)."""
    entrants = sorted({v.model_a for v in group.votes} | {v.model_b for v in group.votes})
    if not entrants:
        return {}
    rows = [(v.model_a, v.model_b, v.winner) for v in group.votes]
    rows += [(entrant, PRIOR, "tie") for entrant in entrants]
    table = pd.DataFrame(rows, columns=["model_a", "model_b", "winner"])
    try:
        result = rate(table, style_control=False, ci="sandwich", with_online_elo=False)
    except CannotRateError:
        logger.exception("env: the group %s could not be fitted", group.submission_id)
        return {}
    rated = {m.model: m for m in result.models}
    judged = [k for k in group.completions if k in rated]
    if not judged:
        return {}
    centre = sum(rated[k].rating for k in judged) / len(judged)
    return {
        k: (
            round(rated[k].rating - centre, _DIGITS),
            round(rated[k].rating_lower - centre, _DIGITS),
            round(rated[k].rating_upper - centre, _DIGITS),
        )
        for k in judged
    }


def env_rewards_fit(group: EnvGroup) -> list[RewardUpdate]:
    """Every completion's record from the group's counted votes."""
    counts = _counts(group)
    scores = _scores(group)
    records = []
    for key in group.completions:
        record = counts[key]
        score = scores.get(key)
        records.append(
            RewardUpdate(
                completion_id=_completion_id(key),
                votes=record["votes"],
                wins=record["wins"],
                losses=record["losses"],
                ties=record["ties"],
                both_bad=record["both_bad"],
                score=score[0] if score else None,
                score_low=score[1] if score else None,
                score_high=score[2] if score else None,
            )
        )
    return records


def _completion_id(key: str) -> uuid.UUID:
    return uuid.UUID(key.removeprefix(COMPLETION_PREFIX))
