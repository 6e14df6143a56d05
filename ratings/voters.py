"""Anomalous voters: the test (``ratings.engine.anomaly``) run over the arena's votes, and the
flags it sets (``arena.services.flags``). Run by ``manage.py flag_voters`` and a periodic task.

Flags are sticky: a voter flagged once keeps the flag on those votes until staff clear it in the
admin (a vote whose flag staff cleared is never flagged for it again). Later votes of a voter
still anomalous are flagged by the next run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from django.conf import settings

from arena.selectors import votes_for_anomaly
from arena.services.flags import ANOMALOUS_VOTER, voters_flag
from ratings.engine.anomaly import voters_anomaly, voters_flagged


@dataclass(frozen=True)
class VoterFlagRun:
    """What a run found: the voters below the threshold (``voter``, ``n_votes``, ``statistic``,
    ``p_value``), their tested votes (``vote_id``, ``voter``, ``p_value``), and the ids of the
    votes it flagged (none on a dry run)."""

    voters: pd.DataFrame
    votes: pd.DataFrame
    n_votes_tested: int
    n_voters_tested: int
    min_votes: int
    threshold: float
    dry_run: bool
    flagged_vote_ids: list[int] = field(default_factory=list)


def voters_flag_run(
    *, dry_run: bool = False, min_votes: int | None = None, threshold: float | None = None
) -> VoterFlagRun:
    """Test every voter; flag the anomalous ones and their votes unless ``dry_run``."""
    min_votes = settings.ARENA_ANOMALY_MIN_VOTES if min_votes is None else min_votes
    threshold = settings.ARENA_ANOMALY_P_THRESHOLD if threshold is None else threshold
    rows = list(votes_for_anomaly())
    frame = pd.DataFrame(
        {
            "vote_id": [r["id"] for r in rows],
            "voter": [r["voter_id"] for r in rows],
            "model_a": [r["battle__model_a__slug"] for r in rows],
            "model_b": [r["battle__model_b__slug"] for r in rows],
            "winner": [r["winner"] for r in rows],
        }
    )
    result = voters_anomaly(frame, min_votes=min_votes)
    flagged = voters_flagged(result, threshold=threshold)
    votes = pd.DataFrame(
        {"vote_id": frame["vote_id"], "voter": frame["voter"], "p_value": result.votes["p_value"]}
    )
    votes = votes[votes["voter"].isin(set(flagged["voter"]))].reset_index(drop=True)
    changed: list[int] = []
    if not dry_run and len(flagged):
        changed = voters_flag(voter_ids=list(flagged["voter"]), reason=ANOMALOUS_VOTER)
    return VoterFlagRun(
        voters=flagged,
        votes=votes,
        n_votes_tested=len(frame),
        n_voters_tested=int((result.voters["n_votes"] >= min_votes).sum()),
        min_votes=min_votes,
        threshold=threshold,
        dry_run=dry_run,
        flagged_vote_ids=changed,
    )
