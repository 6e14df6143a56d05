"""Anomalous voters: the tests (``ratings.engine.anomaly``) run over the arena's votes, and the
flags they set (``arena.services.flags``). Run by ``manage.py flag_voters`` and a periodic task.

Each session (voter id) is tested three ways: against the crowd's rates on each pair, and, from
one Bradley-Terry fit (style-controlled over the votes with style counts) of every tested vote,
a voter x model test and a goodness-of-fit test, each judging the voter against that fit with
its own votes held out (``held_out_expectations``: otherwise a voter with many votes on one model
pulls the model's rating towards itself and hides); the voter's p-value is Bonferroni's over
them. Voters and sources that the voter x model test finds at all suspicious are tested again
against one fit without every suspect's votes, so that sessions favouring the same model from
different addresses cannot hide behind each other's pull.
Sessions sharing an address hash and user-agent class whose first votes follow each other within
``ARENA_ANOMALY_SOURCE_WINDOW_MINUTES`` are tested the same way as one source; a flagged source
flags the votes of all its sessions.

Flags are sticky: a voter flagged once keeps the flag on those votes until staff clear it in the
admin (a vote whose flag staff cleared is never flagged for it again). Later votes of a voter
still anomalous are flagged by the next run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from django.conf import settings

from arena.selectors import votes_for_anomaly
from arena.services.flags import ANOMALOUS_VOTER, voters_flag
from ratings.engine.anomaly import (
    AnomalyResult,
    Expectations,
    expectations_filled,
    fitted_expectations,
    held_out_expectations,
    voter_fit_test,
    voter_model_test,
    voter_sources,
    voters_anomaly,
    voters_combined,
    voters_flagged,
)
from ratings.vote_columns import Kind, VoteColumns, vote_columns


@dataclass(frozen=True)
class VoterFlagRun:
    """What a run found: the voters and sources below the threshold (``voter``, ``n_votes``,
    ``statistic``, ``p_crowd``, ``p_model``, ``p_fit``, ``test``, ``p_value``; a source's
    ``voter`` is its ``source:`` label and ``sessions`` lists its voter ids), their tested votes
    (``vote_id``, ``voter``, ``p_value``: the crowd test's), and the ids of the votes it flagged
    (none on a dry run)."""

    voters: pd.DataFrame
    votes: pd.DataFrame
    n_votes_tested: int
    n_voters_tested: int
    min_votes: int
    threshold: float
    dry_run: bool
    flagged_vote_ids: list[int] = field(default_factory=list)
    flagged_voter_ids: list[str] = field(default_factory=list)


#: What the tests read of each vote (``arena.selectors.votes_for_anomaly``), as columns.
_FIELDS: dict[str, Kind] = {
    "id": "int",
    "voter_id": "text",
    "winner": "text",
    "battle__model_a__slug": "text",
    "battle__model_b__slug": "text",
    "style": "style",
    "ip_hash": "text",
    "user_agent_class": "text",
    "created_at": "micros",
}


def _read() -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """The votes (``vote_id``, ``voter``, ``model_a``, ``model_b``, ``winner`` as categoricals,
    and the flat style counts), which of them have style counts, and the sessions
    (``_sessions``). The columns read are not kept beyond this."""
    votes = vote_columns(votes_for_anomaly(), _FIELDS, order="id")
    assert votes.style is not None  # noqa: S101  (_FIELDS reads it)
    complete, counts = votes.style
    # Categoricals: the tests group by codes, with no string per vote.
    styled = pd.DataFrame(
        {
            "vote_id": votes.numbers["id"],
            "voter": votes.texts["voter_id"].categorical(),
            "model_a": votes.texts["battle__model_a__slug"].categorical(),
            "model_b": votes.texts["battle__model_b__slug"].categorical(),
            "winner": votes.texts["winner"].categorical(),
            **counts,
        }
    )
    return styled, complete, _sessions(votes)


def _sessions(votes: VoteColumns) -> pd.DataFrame:
    """One row per session (voter id, in text order): its first vote's address hash and
    user-agent class (votes in id order), and the time of its earliest vote in seconds."""
    voter = votes.texts["voter_id"]
    present, first = np.unique(voter.codes, return_index=True)
    earliest = np.full(len(voter.values), np.iinfo(np.int64).max)
    np.minimum.at(earliest, voter.codes, votes.numbers["created_at"])
    ip_hash, agent = votes.texts["ip_hash"], votes.texts["user_agent_class"]
    return pd.DataFrame(
        {
            "voter": voter.values[present],
            "ip_hash": ip_hash.values[ip_hash.codes[first]],
            "user_agent_class": agent.values[agent.codes[first]],
            "first_vote": earliest[present] / 1e6,
        }
    )


#: A voter or source whose voter x model p-value is below this is a *suspect*: the fit the
#: tests judge against is made again without every suspect's votes (see ``voters_flag_run``),
#: at most ``SUSPECT_ROUNDS`` times.
SUSPECT_P = 0.05
SUSPECT_ROUNDS = 5


def _tested(
    frame: pd.DataFrame,
    crowd: AnomalyResult,
    expectations: Any,
    *,
    min_votes: int,
    fit_rows: Any = None,
    only: set[str] | None = None,
) -> pd.DataFrame:
    """The three tests of every voter of ``frame`` (of the voters ``only`` names, if given):
    ``crowd`` (``voters_anomaly`` of ``frame``, which needs no fit), and the two model-based
    ones against the fit ``expectations`` come from (made from the rows ``fit_rows`` marks; all
    by default): a voter whose votes are all in it is judged without them
    (``held_out_expectations``), the others as the fit stands."""
    judged = held_out_expectations(
        frame, expectations, min_votes=min_votes, fit_rows=fit_rows, only=only
    )
    voters = crowd.voters
    if only is not None:
        # Both model-based tests read each voter's own votes alone: the others' are left out.
        rows = frame["voter"].isin(only).to_numpy()
        frame = frame[rows]
        judged = Expectations(p_a=judged.p_a[rows], design=judged.design[:, rows])
        voters = voters[voters["voter"].isin(only)]
    model = voter_model_test(frame, judged, min_votes=min_votes)
    fit = voter_fit_test(frame, judged, min_votes=min_votes)
    return voters_combined(voters, model, fit)


def voters_flag_run(
    *, dry_run: bool = False, min_votes: int | None = None, threshold: float | None = None
) -> VoterFlagRun:
    """Test every voter and source; flag the anomalous ones' votes unless ``dry_run``."""
    min_votes = settings.ARENA_ANOMALY_MIN_VOTES if min_votes is None else min_votes
    threshold = settings.ARENA_ANOMALY_P_THRESHOLD if threshold is None else threshold
    window = 60.0 * settings.ARENA_ANOMALY_SOURCE_WINDOW_MINUTES
    styled, complete, sessions = _read()
    frame = styled[["vote_id", "voter", "model_a", "model_b", "winner"]]
    full = expectations = fitted_expectations(styled, style_complete=complete)
    # Sources: the same votes, each under its session's source label; tested where a source
    # holds more than one session (a lone session's test is the one above).
    source = voter_sources(sessions, window_seconds=window) if window > 0 else pd.Series()
    voter = frame["voter"].cat
    names = voter.categories.to_numpy(dtype=object)
    label = pd.Series(names).map(source).to_numpy(dtype=object)
    label = np.where(pd.isna(label), names, label)
    group_code, group_names = pd.factorize(label)
    grouped = frame.assign(
        voter=pd.Categorical.from_codes(
            group_code[voter.codes.to_numpy()], categories=pd.Index(group_names, dtype=object)
        )
    )
    members = source.groupby(source).groups if len(source) else {}
    labels = set(source)
    # Several sessions (from several addresses) that each favour the same model pull its
    # fitted rating up together, so that each one, held out alone, still looks as predicted.
    # So the voters and sources the voter x model test finds at all suspicious (p below
    # SUSPECT_P) are left out of the fit the tests judge against, and everyone is tested
    # again, until no new suspect appears (at most SUSPECT_ROUNDS fits more).
    suspect_sessions: set[str] = set()
    fit_rows = None
    # The crowd test reads no fit: once per grouping, whatever the rounds.
    result = voters_anomaly(frame, min_votes=min_votes)
    by_source_crowd = voters_anomaly(grouped, min_votes=min_votes) if len(source) else None
    for _ in range(SUSPECT_ROUNDS + 1):
        combined = _tested(frame, result, expectations, min_votes=min_votes, fit_rows=fit_rows)
        by_source = combined.iloc[0:0]
        if by_source_crowd is not None:
            by_source = _tested(
                grouped,
                by_source_crowd,
                expectations,
                min_votes=min_votes,
                fit_rows=fit_rows,
                only=labels,
            )
        found = set(combined.loc[combined["p_model"] < SUSPECT_P, "voter"])
        for label in by_source.loc[by_source["p_model"] < SUSPECT_P, "voter"]:
            found |= set(members[label])
        if found <= suspect_sessions:
            break
        suspect_sessions |= found
        fit_rows = ~frame["voter"].isin(suspect_sessions).to_numpy()
        # A model only suspects judged keeps the full fit's rating (nothing else rates it).
        expectations = expectations_filled(
            fitted_expectations(styled, style_complete=complete, fit_rows=fit_rows), full
        )
    combined = combined.copy()
    combined["sessions"] = [[v] for v in combined["voter"]]
    if len(by_source):
        by_source = by_source.copy()
        by_source["sessions"] = [sorted(members[s]) for s in by_source["voter"]]
        combined = pd.concat([combined, by_source], ignore_index=True)
    flagged = voters_flagged(
        AnomalyResult(votes=result.votes, voters=combined), threshold=threshold
    )
    voter_ids = sorted({v for sessions_ in flagged["sessions"] for v in sessions_})
    flagged_votes = pd.DataFrame(
        {"vote_id": frame["vote_id"], "voter": frame["voter"], "p_value": result.votes["p_value"]}
    )
    flagged_votes = flagged_votes[flagged_votes["voter"].isin(set(voter_ids))]
    flagged_votes = flagged_votes.reset_index(drop=True).astype({"voter": str})
    changed: list[int] = []
    if not dry_run and voter_ids:
        changed = voters_flag(voter_ids=voter_ids, reason=ANOMALOUS_VOTER)
    return VoterFlagRun(
        voters=flagged,
        votes=flagged_votes,
        n_votes_tested=len(frame),
        n_voters_tested=int((result.voters["n_votes"] >= min_votes).sum()),
        min_votes=min_votes,
        threshold=threshold,
        dry_run=dry_run,
        flagged_vote_ids=changed,
        flagged_voter_ids=voter_ids,
    )
