"""Celery tasks of the environment API: reference answers, webhook deliveries and their sweep,
and expiry. They keep the names they had in ``arena.tasks`` ("arena.tasks.env_webhook_deliver"
and so on): ``config.queues`` routes by name, the beat schedule names them, and a message queued
before the move must still find its task."""

import logging
import uuid

from celery import Task, shared_task

from arena.tasks import RETRY_COUNTDOWN_MAX
from environment.references import ReferenceFailed, reference_answer_generate
from environment.rewards import env_completions_expire
from environment.runs import env_runs_idle_close
from environment.webhook import (
    WebhookFailed,
    webhook_deliver,
    webhook_retrying_clear,
    webhook_retrying_mark,
    webhook_runs_behind,
)

# Logged under the name they were logged under before the move, which logging configuration and
# alerts may filter on.
logger = logging.getLogger("arena.tasks")


# A webhook whose retries ran out is left to the sweep for this long before a new chain starts.
_WEBHOOK_PAUSE_AFTER_GIVING_UP = 15 * 60


# Back-off of the env tasks' retries: 30 s, 1, 2, 4, 8, then every 10 minutes.
def _backoff(retries: int) -> int:
    return int(min(30 * 2**retries, RETRY_COUNTDOWN_MAX))


@shared_task(  # type: ignore[untyped-decorator]
    bind=True,
    name="arena.tasks.env_reference_answer",
    soft_time_limit=150,
    time_limit=180,
    acks_late=True,
    ignore_result=True,
    max_retries=4,
)
def env_reference_answer(self: Task, submission_id: str, model_id: int) -> bool:
    """Generate and store a reference model's answer to a submission (once: a rerun finds it
    stored). Failures retry with back-off, then are logged; without a broker (eager mode) a
    failure is logged at once rather than retried inside the request that queued it."""
    try:
        stored = reference_answer_generate(
            submission_id=uuid.UUID(submission_id), model_id=model_id
        )
    except ReferenceFailed as exc:
        if self.request.is_eager or self.request.retries >= self.max_retries:
            logger.error(
                "env: no reference answer from model %s for submission %s: %s",
                model_id,
                submission_id,
                exc,
            )
            return False
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
    return stored is not None


@shared_task(  # type: ignore[untyped-decorator]
    bind=True,
    name="arena.tasks.env_webhook_deliver",
    soft_time_limit=120,
    time_limit=150,
    acks_late=True,
    ignore_result=True,
    max_retries=8,
)
def env_webhook_deliver(self: Task, run_id: str) -> int:
    """POST a run's changed reward records to its webhook (``environment.webhook``); a rerun with
    nothing new sends nothing. Unacknowledged batches retry with back-off (8 times), and the
    sweep below queues the run again after that."""
    try:
        delivered = webhook_deliver(run_id=uuid.UUID(run_id))
    except WebhookFailed as exc:
        if self.request.is_eager:
            logger.warning("env: webhook delivery for run %s failed: %s", run_id, exc)
            return 0
        if self.request.retries >= self.max_retries:
            logger.warning("env: webhook delivery for run %s gave up: %s", run_id, exc)
            webhook_retrying_mark(run_id=run_id, seconds=_WEBHOOK_PAUSE_AFTER_GIVING_UP)
            return 0
        countdown = _backoff(self.request.retries)
        webhook_retrying_mark(run_id=run_id, seconds=countdown + 60)
        raise self.retry(exc=exc, countdown=countdown) from exc
    webhook_retrying_clear(run_id=run_id)
    return delivered


@shared_task(  # type: ignore[untyped-decorator]
    name="arena.tasks.env_webhook_sweep",
    soft_time_limit=60,
    time_limit=90,
    acks_late=True,
    ignore_result=True,
)
def env_webhook_sweep() -> int:
    """Queue a delivery for every run whose webhook is behind its feed (a lost enqueue, or
    retries that ran out) and has no retry pending: delivery is at least once."""
    runs = webhook_runs_behind()
    for run_id in runs:
        env_webhook_deliver.apply_async(kwargs={"run_id": str(run_id)})
    return len(runs)


@shared_task(  # type: ignore[untyped-decorator]
    name="arena.tasks.env_completions_expire",
    soft_time_limit=120,
    time_limit=150,
    acks_late=True,
    ignore_result=True,
)
def env_completions_expire_task() -> int:
    """Mark the pending records of expired submissions expired; a rerun finds none."""
    return env_completions_expire()


@shared_task(  # type: ignore[untyped-decorator]
    name="arena.tasks.env_runs_idle_close",
    soft_time_limit=120,
    time_limit=150,
    acks_late=True,
    ignore_result=True,
)
def env_runs_idle_close_task() -> int:
    """Close the open runs whose trainer stopped calling (reason idle); a rerun finds none."""
    return env_runs_idle_close()
