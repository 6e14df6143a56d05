"""Bursts of new sources held out of the leaderboard: ``ratings.engine.cohorts`` over the votes,
and the ``cohort_burst`` flag it sets and lifts (``arena.services.flags``).

Run by every refit before it reads the votes (``ratings.services.snapshot_refresh``), so a
burst never reaches a published snapshot, and by ``manage.py flag_cohorts [--dry-run]``. The
flag is the test's own: each run sets it on the votes it quarantines and lifts it from the votes
it no longer does; staff clearing it in the admin is final for that vote, as for every flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
from django.conf import settings

from arena.selectors import votes_for_cohorts
from arena.services.flags import COHORT_BURST, votes_flag, votes_flag_lift
from ratings.engine.cohorts import cohort_quarantine
from ratings.vote_columns import Kind, texts_shared, vote_columns

_EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
_EPOCH_MICROS = (_EPOCH - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
_SCORE = {"model_a": 1.0, "model_b": 0.0}
_FIELDS: dict[str, Kind] = {
    "id": "int",
    "battle__model_a__slug": "text",
    "battle__model_b__slug": "text",
    "winner": "text",
    "created_at": "micros",
    "cohort_source": "text",
    "flagged": "bool",
    "imported": "bool",
    "established": "bool",
}


@dataclass(frozen=True)
class CohortBurst:
    """A burst as the admin, the command and the bench print it."""

    model: str
    window_hours: float
    window_start: datetime
    n_votes: int
    z_before: float
    z_after: float
    quarantined_votes: int
    quarantined_sources: int


@dataclass(frozen=True)
class CohortRun:
    n_votes: int
    windows_tested: int
    bursts: list[CohortBurst]
    quarantined_ids: list[int]
    flagged: list[int]  # newly flagged by this run (none on a dry run)
    lifted: list[int]  # flag lifted by this run


def cohorts_quarantine_run(*, dry_run: bool = False, announce: bool = True) -> CohortRun:
    """Test every window's cohort, then flag the votes quarantined and lift the flag from the
    votes no longer quarantined (unless ``dry_run``). ``announce`` False: the caller (a refit)
    reads the flags next, so no ``vote_flags_changed`` is sent."""
    age = timedelta(days=settings.RATINGS_COHORT_TRUSTED_DAYS)
    votes = vote_columns(
        votes_for_cohorts(reason=COHORT_BURST, account_age=age), _FIELDS, order="id"
    )
    if not votes.n:
        return CohortRun(0, 0, [], [], [], [])
    ids = votes.numbers["id"]
    (a, b), slugs = texts_shared(
        votes.texts["battle__model_a__slug"], votes.texts["battle__model_b__slug"]
    )
    winner = votes.texts["winner"]
    score = np.array([_SCORE.get(w, 0.5) for w in winner.values], dtype=np.float64)[winner.codes]
    hours = (votes.numbers["created_at"] - _EPOCH_MICROS) / 1e6 / 3600.0
    # Sources numbered in the order of their first vote (the peeling's tie-break).
    source = pd.factorize(votes.texts["cohort_source"].codes)[0].astype(np.int64)
    # Imported history (the demo's expert votes) is the operator's, not a burst of visitors.
    imported = votes.flags["imported"]
    result = cohort_quarantine(
        a,
        b,
        score,
        hours,
        source,
        trusted=imported,
        # A signed-in visitor's account old enough is trusted from its first vote on (an
        # account costs an address that receives mail, and its age is its own history).
        established=votes.flags["established"],
        n_models=len(slugs),
        trusted_hours=24.0 * settings.RATINGS_COHORT_TRUSTED_DAYS,
        windows_hours=settings.RATINGS_COHORT_WINDOWS_HOURS,
        z_detect=settings.RATINGS_COHORT_Z_DETECT,
        z_release=settings.RATINGS_COHORT_Z_RELEASE,
        min_votes=settings.RATINGS_COHORT_MIN_VOTES,
    )
    quarantined = ids[result.quarantined].tolist()
    was = set(ids[votes.flags["flagged"]].tolist())
    flagged: list[int] = []
    lifted: list[int] = []
    if not dry_run:
        flagged = votes_flag(vote_ids=quarantined, reason=COHORT_BURST, announce=announce)
        lifted = votes_flag_lift(
            vote_ids=sorted(was - set(quarantined)), reason=COHORT_BURST, announce=announce
        )
    bursts = [
        CohortBurst(
            model=str(slugs[burst.model]),
            window_hours=burst.window_hours,
            window_start=_EPOCH + timedelta(hours=burst.window_start_hours),
            n_votes=burst.n_votes,
            z_before=burst.z_before,
            z_after=burst.z_after,
            quarantined_votes=burst.quarantined_votes,
            quarantined_sources=burst.quarantined_sources,
        )
        for burst in result.bursts
    ]
    return CohortRun(
        n_votes=votes.n,
        windows_tested=result.windows_tested,
        bursts=bursts,
        quarantined_ids=quarantined,
        flagged=flagged,
        lifted=lifted,
    )
