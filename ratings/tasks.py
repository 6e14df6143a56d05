"""Celery tasks of the ratings side: thin wrappers around ``ratings.services``."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from ratings import services

logger = logging.getLogger(__name__)

REFRESH_PENDING_KEY = "ratings:snapshot-refresh-pending"


@shared_task(
    name="ratings.tasks.snapshot_refresh",
    queue="ratings",
    soft_time_limit=15 * 60,
    time_limit=16 * 60,
    acks_late=True,
    ignore_result=True,
)
def snapshot_refresh(force: bool = False) -> dict[str, Any]:
    """Write a leaderboard snapshot if the votes changed; a rerun on the same votes is a no-op."""
    result = services.snapshot_refresh(force=force)
    return {
        "snapshot_id": result.snapshot.pk if result.snapshot else None,
        "created": result.created,
    }


def snapshot_refresh_enqueue(*, force: bool = False) -> None:
    """Queue a refresh once the current transaction commits (immediately outside one)."""
    transaction.on_commit(lambda: snapshot_refresh.apply_async(kwargs={"force": force}))


def snapshot_refresh_after_vote(**kwargs: Any) -> None:
    """``arena.signals.vote_recorded`` receiver: one refresh per debounce window.

    The first vote of a window queues a run ``RATINGS_REFRESH_DEBOUNCE_SECONDS`` later; votes in
    between are covered by it since the run reads every vote when it starts. A vote that lands
    after that read waits for the next vote or the periodic sweep (``config/schedule.py``).
    A failure to enqueue is logged, never raised into the request that recorded the vote.
    """
    if not settings.RATINGS_REFRESH_ON_VOTE:
        return
    delay = settings.RATINGS_REFRESH_DEBOUNCE_SECONDS

    def enqueue() -> None:
        try:
            # Eager mode (no broker) runs the task right here, so the debounce would only hide
            # the latest votes until the next one; it applies when a worker runs the task.
            eager = bool(getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False))
            if not eager and delay > 0 and not cache.add(REFRESH_PENDING_KEY, 1, timeout=delay):
                return
            snapshot_refresh.apply_async(countdown=0 if eager else delay)
        except Exception:
            logger.exception("ratings: could not enqueue a snapshot refresh after a vote")

    transaction.on_commit(enqueue)
