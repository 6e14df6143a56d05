"""Reads of the environment API: a token's run, its counts, its reward feed after a cursor.

The reward feed is ordered by ``EnvCompletion.seq``. Every change of a record (and its
creation) takes the next number of its run's ``reward_seq`` under the run's row lock, so
numbers commit in the order they are taken: a reader that has seen every record up to ``seq =
C`` will never later meet a record committed with a number at or below ``C``. Reading ``seq >
cursor`` therefore neither skips a change nor repeats one; a record is delivered again only when
it changed (and then with its new number).
"""

import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings
from django.db.models import Count, Q

from arena.errors import ArenaError, ErrorCode, not_found
from arena.models import ApiToken, Vote
from environment.models import EnvBattle, EnvCompletion, EnvRun, EnvSubmission
from environment.outbound import url_shown
from environment.payloads import (
    ClosedReason,
    RewardRecord,
    RewardsPage,
    RunCounts,
    RunPayload,
    RunsPage,
    RunSummary,
    SubmissionPayload,
    win_rate,
)

REWARDS_DEFAULT_LIMIT = 100
REWARDS_MAX_LIMIT = 1000
RUNS_DEFAULT_LIMIT = 20
RUNS_MAX_LIMIT = 100


def env_run_for_token(*, run_id: uuid.UUID | str, token: ApiToken) -> EnvRun:
    """The run ``run_id`` of ``token``; a run of another token is the same 404 as a missing one,
    so that a token learns nothing of the runs it does not own."""
    try:
        key = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except ValueError:
        raise not_found("Run") from None
    run = EnvRun.objects.filter(pk=key, token=token).first()
    if run is None:
        raise not_found("Run")
    return run


def env_runs_counts(*, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, RunCounts]:
    """The counts of each run of ``run_ids`` (zeros for a run with nothing yet): three grouped
    queries whatever the number of runs."""
    completions: dict[uuid.UUID, dict[str, Any]] = {
        row["run_id"]: dict(row)
        for row in EnvCompletion.objects.filter(run_id__in=run_ids)
        .order_by()
        .values("run_id")
        .annotate(
            completions=Count("pk"),
            pending=Count("pk", filter=Q(status=EnvCompletion.Status.PENDING)),
            complete=Count("pk", filter=Q(status=EnvCompletion.Status.COMPLETE)),
            expired=Count("pk", filter=Q(status=EnvCompletion.Status.EXPIRED)),
            cancelled=Count("pk", filter=Q(status=EnvCompletion.Status.CANCELLED)),
        )
    }
    # A battle between two completions of the run adds a vote to each record: the run's votes
    # are the battles' votes, counted once, not the records' sum.
    battles: dict[uuid.UUID, dict[str, Any]] = {
        row["run_id"]: dict(row)
        for row in EnvBattle.objects.filter(run_id__in=run_ids)
        .order_by()
        .values("run_id")
        .annotate(
            battles=Count("pk"),
            votes=Count("pk", filter=Q(battle__vote__isnull=False, battle__vote__flagged=False)),
        )
    }
    submissions = dict(
        EnvSubmission.objects.filter(run_id__in=run_ids)
        .order_by()
        .values("run_id")
        .annotate(n=Count("pk"))
        .values_list("run_id", "n")
    )
    out: dict[uuid.UUID, RunCounts] = {}
    for run_id in run_ids:
        c: dict[str, Any] = completions.get(run_id, {})
        b: dict[str, Any] = battles.get(run_id, {})
        out[run_id] = {
            "submissions": int(submissions.get(run_id, 0)),
            "completions": int(c.get("completions", 0)),
            "pending": int(c.get("pending", 0)),
            "complete": int(c.get("complete", 0)),
            "expired": int(c.get("expired", 0)),
            "cancelled": int(c.get("cancelled", 0)),
            "votes": int(b.get("votes", 0)),
            "battles": int(b.get("battles", 0)),
        }
    return out


def env_run_counts(*, run: EnvRun) -> RunCounts:
    return env_runs_counts(run_ids=[run.pk])[run.pk]


def env_run_payload(*, run: EnvRun) -> RunPayload:
    return {
        "id": str(run.pk),
        "name": run.name,
        "state": "open" if run.state == EnvRun.State.OPEN else "closed",
        "references": sorted(run.references.values_list("slug", flat=True)),
        "votes_per_completion": run.votes_per_completion,
        "ttl_hours": run.ttl_hours,
        "share": run.share,
        "webhook_url": url_shown(run.webhook_url),
        "reward_model": run.reward_model,
        "webhook_delivery": {
            "status": run.webhook_status or "none",  # type: ignore[typeddict-item]
            "error": run.webhook_error or None,
            "attempted_at": (
                run.webhook_attempted_at.isoformat() if run.webhook_attempted_at else None
            ),
        },
        "created_at": run.created_at.isoformat(),
        "closed_at": run.closed_at.isoformat() if run.closed_at else None,
        "closed_reason": _closed_reason(run),
        "last_activity_at": run.touched_at.isoformat(),
        "counts": env_run_counts(run=run),
    }


def _closed_reason(run: EnvRun) -> ClosedReason | None:
    if run.state == EnvRun.State.OPEN:
        return None
    # The choices' values are the API's words; a run closed before reasons were kept was closed
    # by its trainer.
    return cast(ClosedReason, run.closed_reason or EnvRun.ClosedReason.TRAINER)


def env_run_summary(*, run: EnvRun, counts: RunCounts) -> RunSummary:
    return {
        "id": str(run.pk),
        "name": run.name,
        "state": "open" if run.state == EnvRun.State.OPEN else "closed",
        "closed_reason": _closed_reason(run),
        "created_at": run.created_at.isoformat(),
        "closed_at": run.closed_at.isoformat() if run.closed_at else None,
        "last_activity_at": run.touched_at.isoformat(),
        "counts": counts,
    }


def env_runs_page(*, token: ApiToken, offset: int = 0, limit: int = RUNS_DEFAULT_LIMIT) -> RunsPage:
    """The runs of ``token`` only, newest first (then by id, so pages do not overlap), from
    ``offset``, at most ``limit`` (1-100, as the API's query schema checks); ``next_offset`` is
    null after the last page."""
    # One more than asked says whether another page follows.
    runs = list(
        EnvRun.objects.filter(token=token).order_by("-created_at", "-id")[
            offset : offset + limit + 1
        ]
    )
    more = len(runs) > limit
    counts = env_runs_counts(run_ids=[run.pk for run in runs[:limit]])
    return {
        "runs": [env_run_summary(run=run, counts=counts[run.pk]) for run in runs[:limit]],
        "next_offset": offset + limit if more else None,
    }


def env_submission_payload(*, submission: EnvSubmission) -> SubmissionPayload:
    completions = EnvCompletion.objects.filter(submission=submission).order_by("index")
    return {
        "id": str(submission.pk),
        "run_id": str(submission.run_id),
        "idempotency_key": submission.idempotency_key,
        "completions": [{"id": str(c.pk), "index": c.index} for c in completions],
        "created_at": submission.created_at.isoformat(),
        "expires_at": submission.expires_at.isoformat(),
    }


def reward_record(completion: EnvCompletion) -> RewardRecord:
    """The completion's reward record, as the feed and the webhook send it."""
    status = completion.status
    return {
        "completion_id": str(completion.pk),
        "submission_id": str(completion.submission_id),
        "meta": completion.meta,
        "votes": completion.votes,
        "wins": completion.wins,
        "losses": completion.losses,
        "ties": completion.ties,
        "both_bad": completion.both_bad,
        "win_rate": win_rate(
            votes=completion.votes,
            wins=completion.wins,
            ties=completion.ties,
            both_bad=completion.both_bad,
        ),
        "score": completion.score,
        "score_low": completion.score_low,
        "score_high": completion.score_high,
        "source": "human"
        if completion.source == EnvCompletion.Source.HUMAN
        else "model"
        if completion.source == EnvCompletion.Source.MODEL
        else None,
        "status": "complete"
        if status == EnvCompletion.Status.COMPLETE
        else "expired"
        if status == EnvCompletion.Status.EXPIRED
        else "cancelled"
        if status == EnvCompletion.Status.CANCELLED
        else "pending",
    }


def env_rewards_page(
    *, run: EnvRun, cursor: int = 0, limit: int = REWARDS_DEFAULT_LIMIT
) -> tuple[list[RewardRecord], int]:
    """The records of ``run`` changed after ``cursor`` (``seq > cursor``), oldest change first,
    at most ``limit`` (1-1000); and the cursor to pass next: the last record's ``seq``, or
    ``cursor`` itself when there is none."""
    if cursor < 0:
        raise ArenaError(ErrorCode.INVALID, "cursor must be 0 or more.", field="cursor")
    if not 1 <= limit <= REWARDS_MAX_LIMIT:
        raise ArenaError(
            ErrorCode.INVALID, f"limit must be from 1 to {REWARDS_MAX_LIMIT}.", field="limit"
        )
    # The text and style counts are not part of a record: up to 1000 answers of 20000
    # characters each stay in the database.
    completions = list(
        EnvCompletion.objects.filter(run=run, seq__gt=cursor)
        .defer("text", "style")
        .order_by("seq")[:limit]
    )
    records = [reward_record(completion) for completion in completions]
    next_cursor = completions[-1].seq if completions else cursor
    return records, next_cursor


def env_rewards_payload(*, run: EnvRun, cursor: int, limit: int) -> RewardsPage:
    records, next_cursor = env_rewards_page(run=run, cursor=cursor, limit=limit)
    return {"records": records, "next_cursor": next_cursor}


# --- A group as the rating side fits it (environment.rewards, ratings.env_rewards) -------------

COMPLETION_PREFIX = "c:"
REFERENCE_PREFIX = "r:"


def completion_key(completion_id: uuid.UUID | str) -> str:
    """An entrant's name in a group's fit: a submitted completion."""
    return f"{COMPLETION_PREFIX}{completion_id}"


def reference_key(model_slug: str) -> str:
    """An entrant's name in a group's fit: a reference model's answer."""
    return f"{REFERENCE_PREFIX}{model_slug}"


@dataclass(frozen=True)
class GroupVote:
    """One counted (unflagged) vote of an environment battle of the group, by entrant key."""

    model_a: str
    model_b: str
    winner: str  # a Vote.Winner value


@dataclass(frozen=True)
class EnvGroup:
    """A submission's group as the rating side fits it."""

    submission_id: uuid.UUID
    completions: tuple[str, ...]  # completion keys, in group order
    votes: tuple[GroupVote, ...]
    # Battles whose unflagged vote the source bound leaves out of the fit.
    left_out: tuple[uuid.UUID, ...] = ()


def _source_bounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` (``winner, completion_a, completion_b, slug_a, slug_b, source, ...``, in vote order)
    without the votes past their source's bound on one of their completions: a source (address
    hash, or session where no address was kept) counts at most ``max(ARENA_ENV_SOURCE_MIN_VOTES,
    RATINGS_SOURCE_MAX_SHARE x the completion's votes from the other sources)`` votes on a
    completion, the first ones, as the leaderboard bounds a source on a model. Reference answers
    are not bounded on their own: each of their votes judges a completion too."""
    share = float(settings.RATINGS_SOURCE_MAX_SHARE)
    if share <= 0:
        return rows
    total: Counter[Any] = Counter()
    mine: Counter[tuple[str, Any]] = Counter()
    for row in rows:
        for completion in {row[1], row[2]} - {None}:
            total[completion] += 1
            mine[(row[5], completion)] += 1
    floor = settings.ARENA_ENV_SOURCE_MIN_VOTES
    counted: Counter[tuple[str, Any]] = Counter()
    kept = []
    for row in rows:
        cells = [(row[5], c) for c in {row[1], row[2]} - {None}]
        if all(counted[cell] < max(floor, share * (total[cell[1]] - mine[cell])) for cell in cells):
            kept.append(row)
            counted.update(cells)
    return kept


def env_group(*, submission_id: uuid.UUID) -> EnvGroup:
    """The group's completions and the unflagged votes of its environment battles.

    Flagged votes do not count (as for the leaderboard), nor a source's votes past its bound on
    a completion (``_source_bounded``). A side without a completion is the reference model's
    answer, named by the battle's model on that side.
    """
    completion_ids = EnvCompletion.objects.filter(submission_id=submission_id).order_by("index")
    rows = (
        Vote.objects.filter(
            battle__env__submission_id=submission_id,
            flagged=False,
        )
        .order_by("created_at", "id")
        .values_list(
            "winner",
            "battle__env__completion_a_id",
            "battle__env__completion_b_id",
            "battle__model_a__slug",
            "battle__model_b__slug",
            "ip_hash",
            "voter_id",
            "battle_id",
        )
    )
    every = [(*row[:5], row[5] or f"session:{row[6]}", row[7]) for row in rows]
    bounded = _source_bounded(every)
    kept = {row[6] for row in bounded}
    votes = tuple(
        GroupVote(
            model_a=completion_key(a) if a is not None else reference_key(slug_a),
            model_b=completion_key(b) if b is not None else reference_key(slug_b),
            winner=winner,
        )
        for winner, a, b, slug_a, slug_b, _source, _battle in bounded
    )
    return EnvGroup(
        submission_id=submission_id,
        completions=tuple(completion_key(pk) for pk in completion_ids.values_list("pk", flat=True)),
        votes=votes,
        left_out=tuple(row[6] for row in every if row[6] not in kept),
    )


def env_battle_submission(*, battle_id: uuid.UUID) -> uuid.UUID | None:
    """The submission an environment battle judges (None for any other battle)."""
    return (
        EnvBattle.objects.filter(battle_id=battle_id)
        .values_list("submission_id", flat=True)
        .first()
    )
