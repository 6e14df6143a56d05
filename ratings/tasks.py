"""When the leaderboard is refitted: the Celery task that writes a snapshot, and the scheduling.

``snapshot_refresh`` runs ``services.snapshot_refresh`` (a no-op when the votes and parameters
are unchanged). After a vote (``arena.signals.vote_recorded``) a refresh is queued once per
debounce window, after the vote's transaction commits; without a broker (eager mode) a single
background thread runs it instead, so a vote's response never waits for a fit. Failures to
queue are logged, never raised into the request.
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db import connections, transaction

from arena.models import Battle
from arena.signals import after_commit
from environment.rewards import env_rewards_update, env_submissions_behind
from environment.selectors import env_battle_submission

logger = logging.getLogger(__name__)

REFRESH_PENDING_KEY = "ratings:snapshot-refresh-pending"


# Routed to the heavy "ratings" queue by config/queues.py (the task-level ``queue``
# attribute is deprecated in Celery 5).
@shared_task(  # type: ignore[untyped-decorator]
    name="ratings.tasks.snapshot_refresh",
    soft_time_limit=15 * 60,
    time_limit=16 * 60,
    acks_late=True,
    ignore_result=True,
)
def snapshot_refresh(force: bool = False) -> dict[str, Any]:
    """Write a leaderboard snapshot if the votes changed; a rerun on the same votes is a no-op."""
    # The fit's modules (numpy, pandas, pyarrow, the engine) load in the process that runs a
    # fit, not in every web worker and command that registers the tasks (ratings.apps).
    from ratings import services

    result = services.snapshot_refresh(force=force)
    return {
        "snapshot_id": result.snapshot.pk if result.snapshot else None,
        "created": result.created,
    }


def snapshot_refresh_enqueue(*, force: bool = False) -> None:
    """Queue a refresh once the current transaction commits (immediately outside one)."""
    after_commit(lambda: snapshot_refresh.apply_async(kwargs={"force": force}))


def snapshot_refresh_after_vote(**kwargs: Any) -> None:
    """``arena.signals.vote_recorded`` receiver: one refresh per debounce window.

    The first vote of a window queues a run ``RATINGS_REFRESH_DEBOUNCE_SECONDS`` later; votes in
    between are covered by it since the run reads every vote when it starts. A vote that lands
    after that read waits for the next vote or the periodic sweep (``config/schedule.py``).
    A failure to enqueue is logged, never raised into the request that recorded the vote.
    """
    if not settings.RATINGS_REFRESH_ON_VOTE:
        return
    if kwargs.get("source") == Battle.Source.ENV:
        return  # environment battles never enter the leaderboard (env_rewards_after_vote)
    _SNAPSHOT_REFRESH.schedule(snapshot_refresh, delay=settings.RATINGS_REFRESH_DEBOUNCE_SECONDS)


def snapshot_refresh_after_reaction(**kwargs: Any) -> None:
    """``arena.signals.counted_reaction_changed`` receiver: with RATINGS_COUNT_REACTIONS, a
    reaction that decided a tie may have stopped counting, so the leaderboard is refitted in the
    same debounce window as the votes'. The refit sees the change by the votes' mark
    (``ratings.vote_sources.rating_votes_mark``: the ties reactions decide are part of it)."""
    if not (settings.RATINGS_COUNT_REACTIONS and settings.RATINGS_REFRESH_ON_VOTE):
        return
    _SNAPSHOT_REFRESH.schedule(snapshot_refresh, delay=settings.RATINGS_REFRESH_DEBOUNCE_SECONDS)


class _DebouncedRun:
    """One run of a refit task per debounce window, queued after the transaction commits.

    The first event of a window queues a run ``delay`` seconds later, guarded by a cache key, and
    the run reads everything committed when it starts, so events in between need no run of
    their own. Eager mode (no broker, the laptop demo) would run the task inside the request, so
    one background thread stands in for the worker instead, with at most one run queued behind
    the running one. A failure to queue is logged, never raised into the request."""

    def __init__(self, *, owner: str, what: str, pending_key: str, thread_name: str) -> None:
        self.owner, self.what = owner, what  # for the log: "<owner>: could not enqueue a <what>"
        self.pending_key = pending_key
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._queued = threading.Lock()

    def schedule(self, task: Any, *, delay: int) -> None:
        def enqueue() -> None:
            try:
                eager = bool(getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False))
                if eager and settings.RATINGS_EAGER_REFRESH_IN_BACKGROUND:
                    self.in_background(task)
                    return
                if not eager and delay > 0 and not cache.add(self.pending_key, 1, timeout=delay):
                    return
                task.apply_async(countdown=0 if eager else delay)
            except Exception:
                logger.exception("%s: could not enqueue a %s after a vote", self.owner, self.what)

        transaction.on_commit(enqueue)

    def in_background(self, task: Any) -> None:
        if not self._queued.acquire(blocking=False):
            return

        def run() -> None:
            self._queued.release()
            try:
                task.apply()
            except Exception:
                logger.exception("%s: background %s failed", self.owner, self.what)
            finally:
                connections.close_all()

        self.executor.submit(run)


_SNAPSHOT_REFRESH = _DebouncedRun(
    owner="ratings",
    what="snapshot refresh",
    pending_key=REFRESH_PENDING_KEY,
    thread_name="ratings-refresh",
)
_background = _SNAPSHOT_REFRESH.executor  # the demo's refit thread (tests wait on it)


@shared_task(  # type: ignore[untyped-decorator]
    name="ratings.tasks.voters_flag",
    soft_time_limit=10 * 60,
    time_limit=11 * 60,
    acks_late=True,
    ignore_result=True,
)
def voters_flag() -> dict[str, Any]:
    """Flag anomalous voters and their votes (``manage.py flag_voters`` without --dry-run)."""
    from ratings.voters import voters_flag_run

    run = voters_flag_run()
    return {"voters": list(run.voters["voter"]), "votes_flagged": len(run.flagged_vote_ids)}


def snapshot_refresh_after_flags(**kwargs: Any) -> None:
    """``arena.signals.vote_flags_changed`` receiver: votes were flagged or cleared, so the
    leaderboard is refitted. Forced: a flag set and another cleared between two runs could leave
    the votes' count and high-water mark as they were. Sent after commit; a failure to queue is
    logged (the sweep's next run still sees a changed count)."""
    try:
        eager = bool(getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False))
        if eager and settings.RATINGS_EAGER_REFRESH_IN_BACKGROUND:
            _SNAPSHOT_REFRESH.in_background(snapshot_refresh)  # not inside the admin's request
            return
        snapshot_refresh.apply_async(kwargs={"force": True})
    except Exception:
        logger.exception("ratings: could not enqueue a snapshot refresh after flags changed")


# --- Environment rewards (environment): a group's records refitted after each of its votes ---


@shared_task(  # type: ignore[untyped-decorator]
    name="ratings.tasks.env_rewards_refresh",
    soft_time_limit=60,
    time_limit=90,
    acks_late=True,
    ignore_result=True,
)
def env_rewards_refresh(submission_id: str) -> int:
    """Refit one group's reward records (``ratings.env_rewards``); returns how many changed.
    A rerun on the same votes changes nothing. Queued on ``default``: a group's fit is small."""
    from ratings.env_rewards import env_rewards_fit

    return env_rewards_update(submission_id=uuid.UUID(submission_id), fit=env_rewards_fit)


@shared_task(  # type: ignore[untyped-decorator]
    name="ratings.tasks.env_rewards_sweep",
    soft_time_limit=120,
    time_limit=150,
    acks_late=True,
    ignore_result=True,
)
def env_rewards_sweep() -> int:
    """Refit the groups whose records are older than their latest counted vote (an after-vote
    enqueue that was lost); returns how many groups were refitted."""
    from ratings.env_rewards import env_rewards_fit

    behind = env_submissions_behind()
    for submission_id in behind:
        env_rewards_update(submission_id=submission_id, fit=env_rewards_fit)
    return len(behind)


def env_rewards_after_vote(**kwargs: Any) -> None:
    """``arena.signals.vote_recorded`` receiver: a vote on an environment battle queues its
    group's refit (after commit; a failure to queue is logged, never raised into the vote)."""
    if kwargs.get("source") != Battle.Source.ENV:
        return
    submission_id = env_battle_submission(battle_id=kwargs["battle_id"])
    if submission_id is None:
        return

    def enqueue() -> None:
        try:
            env_rewards_refresh.apply_async(kwargs={"submission_id": str(submission_id)})
        except Exception:
            logger.exception("ratings: could not enqueue the env rewards of %s", submission_id)

    transaction.on_commit(enqueue)


# --- The reward model (ratings.reward_model): refits after votes, a run's rewards at once ---
# Both on the "rewardmodel" queue (config/queues.py), whose worker runs with the
# reward-model extra installed; off unless ARENA_REWARD_MODEL is on and the extra importable.

REWARD_MODEL_PENDING_KEY = "ratings:reward-model-refit-pending"


def _reward_model_unavailable() -> str | None:
    from ratings.reward_model.services import reward_model_unavailable

    return reward_model_unavailable()


@shared_task(  # type: ignore[untyped-decorator]
    name="ratings.tasks.reward_model_refit",
    soft_time_limit=15 * 60,
    time_limit=16 * 60,
    acks_late=True,
    ignore_result=True,
)
def reward_model_refit(force: bool = False) -> int | None:
    """Fit the reward model on the votes and store a snapshot (a no-op on the same votes);
    returns the snapshot's id, or None where the reward model is off or cannot run."""
    reason = _reward_model_unavailable()
    if reason is not None:
        logger.info("reward model: no refit, %s", reason)
        return None
    from ratings.reward_model.services import reward_model_refit as refit

    return int(refit(force=force).pk)


@shared_task(  # type: ignore[untyped-decorator]
    name="ratings.tasks.reward_model_score",
    soft_time_limit=60,
    time_limit=90,
    acks_late=True,
    ignore_result=True,
)
def reward_model_score(submission_id: str) -> int:
    """The model rewards of one submission's completions; returns how many records changed (a
    rerun changes nothing)."""
    if _reward_model_unavailable() is not None:
        return 0
    from ratings.reward_model.services import reward_model_score_submission

    return reward_model_score_submission(submission_id=uuid.UUID(submission_id))


@shared_task(  # type: ignore[untyped-decorator]
    name="ratings.tasks.reward_model_score_sweep",
    soft_time_limit=5 * 60,
    time_limit=6 * 60,
    acks_late=True,
    ignore_result=True,
)
def reward_model_score_sweep() -> int:
    """Score the pending submissions of model-reward runs whose scoring was lost; returns how
    many submissions it scored."""
    if _reward_model_unavailable() is not None:
        return 0
    from ratings.reward_model.services import (
        reward_model_score_submission,
        submissions_unscored,
    )

    unscored = submissions_unscored()
    for submission_id in unscored:
        reward_model_score_submission(submission_id=submission_id)
    return len(unscored)


def reward_model_after_submission(**kwargs: Any) -> None:
    """``arena.signals.env_submission_created`` receiver (sent after commit): the submission's
    model rewards are computed on the rewardmodel queue (in this process with eager tasks: the
    demo and the tests). A failure is logged, never raised into the submission's request; the
    sweep scores it later."""
    if not settings.ARENA_REWARD_MODEL:
        return  # switched off since the run was created: no worker may read the queue
    try:
        reward_model_score.apply_async(kwargs={"submission_id": str(kwargs["submission_id"])})
    except Exception:
        logger.exception("reward model: could not score submission %s", kwargs.get("submission_id"))


def reward_model_refit_after_vote(**kwargs: Any) -> None:
    """``arena.signals.vote_recorded`` (and ``vote_flags_changed``) receiver: one refit per
    ``ARENA_REWARD_MODEL_DEBOUNCE_SECONDS`` window, as the leaderboard's refresh is debounced
    (the first vote of a window queues a refit that reads every vote when it starts). Nothing
    is queued while the reward model is off; a failure to queue is logged."""
    if not settings.ARENA_REWARD_MODEL:
        return
    _REWARD_MODEL_REFIT.schedule(
        reward_model_refit, delay=settings.ARENA_REWARD_MODEL_DEBOUNCE_SECONDS
    )


_REWARD_MODEL_REFIT = _DebouncedRun(
    owner="reward model",
    what="refit",
    pending_key=REWARD_MODEL_PENDING_KEY,
    thread_name="reward-model",
)
