"""Signed, retried delivery of changed reward records to a run's webhook.

A run with a ``webhook_url`` gets every record whose ``seq`` is above ``EnvRun.webhook_seq``
(changed since the last acknowledged delivery), in ``seq`` order, ``WEBHOOK_BATCH`` per POST::

    POST <webhook_url>
    Content-Type: application/json
    X-Arena-Delivery: <run id>:<first seq>-<last seq>
    X-Arena-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the run's secret>

    {"id": "<run id>:<first seq>-<last seq>", "run_id": "<run id>", "records": [...]}

The records are exactly those of the rewards feed (``environment.selectors.reward_record``). Every
POST goes through the guarded client of ``environment.outbound`` (https, a public address checked
and pinned at each POST, no redirects, a bounded time and answer). A 2xx answer moves
``webhook_seq`` forward to the batch's last ``seq`` (under the run's row lock, never
backwards); anything else (another status, a redirect, a timeout, a refused connection, the
guard's refusal) leaves it, is stored on the run as its delivery status, and the task
(``arena.tasks.env_webhook_deliver``, on the ``webhooks`` queue) retries with exponential
back-off. A periodic sweep (``arena.tasks.env_webhook_sweep``) queues every run still behind
whose retries are not pending (a mark in the cache while a retry waits, and for a while after
the last one gave up, so a dead receiver gets one chain of retries at a time), so delivery is at
least once; a receiver drops a repeated delivery by its id (a record sent again after it changed comes in a
batch with a new id, carrying its new state).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid

from celery import current_app
from django.core.cache import cache
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from environment.models import EnvCompletion, EnvRun
from environment.outbound import OutboundFailed, OutboundRefused, Resolver, outbound_post
from environment.selectors import reward_record

logger = logging.getLogger(__name__)

DELIVER_TASK = "arena.tasks.env_webhook_deliver"
WEBHOOK_BATCH = 100
# Batches one task run sends before it hands the rest to a fresh task (keeps a run short).
WEBHOOK_BATCHES_PER_RUN = 20
WEBHOOK_ERROR_MAX = 500
SIGNATURE_HEADER = "X-Arena-Signature"
DELIVERY_HEADER = "X-Arena-Delivery"


class WebhookFailed(Exception):
    """The receiver did not acknowledge a batch (status, timeout, connection)."""


def webhook_signature(secret: str, body: bytes) -> str:
    """The ``X-Arena-Signature`` value of ``body``: ``sha256=`` and the hex HMAC-SHA256."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def webhook_enqueue(*, run_id: uuid.UUID) -> None:
    """Queue a delivery for the run once the current transaction commits.

    The task is looked up by name in Celery's registry: the arena's tasks module imports this
    one, so importing it back would be a cycle. A failure to queue is logged; the sweep catches
    the run later.
    """

    def send() -> None:
        try:
            current_app.tasks[DELIVER_TASK].apply_async(kwargs={"run_id": str(run_id)})
        except Exception:
            logger.exception("env: could not queue a webhook delivery for run %s", run_id)

    transaction.on_commit(send)


def _batch_body(run: EnvRun, completions: list[EnvCompletion]) -> tuple[str, bytes]:
    delivery_id = f"{run.pk}:{completions[0].seq}-{completions[-1].seq}"
    payload = {
        "id": delivery_id,
        "run_id": str(run.pk),
        "records": [reward_record(c) for c in completions],
    }
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return delivery_id, body.encode()


def _acknowledge(run_id: uuid.UUID, last_seq: int) -> None:
    with transaction.atomic():
        # Under the lock, and only forward: a slower concurrent delivery of an older batch
        # cannot move the mark back.
        EnvRun.objects.select_for_update().filter(pk=run_id, webhook_seq__lt=last_seq).update(
            webhook_seq=last_seq
        )
        _outcome_record(run_id, EnvRun.WebhookStatus.DELIVERED, "")


def _outcome_record(run_id: uuid.UUID, status: str, error: str) -> None:
    EnvRun.objects.filter(pk=run_id).update(
        webhook_status=status,
        webhook_error=error[:WEBHOOK_ERROR_MAX],
        webhook_attempted_at=timezone.now(),
    )


def _failed(run_id: uuid.UUID, delivery_id: str, status: str, error: str) -> WebhookFailed:
    _outcome_record(run_id, status, error)
    return WebhookFailed(f"{delivery_id}: {status}: {error}")


def webhook_deliver(*, run_id: uuid.UUID, resolve: Resolver | None = None) -> int:
    """POST the run's unacknowledged records, a batch at a time, through the guarded client
    (``environment.outbound``: the URL and every address of its host are checked again at each
    POST); returns how many records were acknowledged. Raises ``WebhookFailed`` at the first
    batch not acknowledged (the records before it stay acknowledged). Each attempt's outcome is
    stored on the run (``webhook_status``, ``webhook_error``). A run without a webhook, or with
    nothing new, sends nothing. ``resolve`` replaces the host's DNS resolution (tests).
    """
    run = EnvRun.objects.filter(pk=run_id).first()
    if run is None or not run.webhook_url:
        return 0
    delivered = 0
    for _ in range(WEBHOOK_BATCHES_PER_RUN):
        run.refresh_from_db(fields=["webhook_seq", "webhook_url", "webhook_secret"])
        completions = list(
            EnvCompletion.objects.filter(run=run, seq__gt=run.webhook_seq).order_by("seq")[
                :WEBHOOK_BATCH
            ]
        )
        if not completions:
            return delivered
        delivery_id, body = _batch_body(run, completions)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: webhook_signature(run.webhook_secret, body),
            DELIVERY_HEADER: delivery_id,
            "User-Agent": "arena-env-webhook/1",
        }
        try:
            response = outbound_post(run.webhook_url, body=body, headers=headers, resolve=resolve)
        except OutboundRefused as exc:
            raise _failed(run.pk, delivery_id, EnvRun.WebhookStatus.REFUSED, str(exc)) from exc
        except OutboundFailed as exc:
            raise _failed(run.pk, delivery_id, EnvRun.WebhookStatus.FAILED, str(exc)) from exc
        if not 200 <= response.status < 300:
            note = " (redirects are not followed)" if 300 <= response.status < 400 else ""
            raise _failed(
                run.pk, delivery_id, EnvRun.WebhookStatus.FAILED, f"HTTP {response.status}{note}"
            )
        _acknowledge(run.pk, completions[-1].seq)
        delivered += len(completions)
    # More than one run's worth: the rest goes to a fresh task.
    webhook_enqueue(run_id=run.pk)
    return delivered


def _retrying_key(run_id: uuid.UUID | str) -> str:
    return f"arena:env-webhook-retrying:{run_id}"


def webhook_retrying_mark(*, run_id: uuid.UUID | str, seconds: int) -> None:
    """Note that the run's delivery is waiting to be retried (or has just given up), so that the
    sweep does not start a second chain of retries beside it."""
    cache.set(_retrying_key(run_id), 1, timeout=seconds)


def webhook_retrying_clear(*, run_id: uuid.UUID | str) -> None:
    cache.delete(_retrying_key(run_id))


def webhook_runs_behind() -> list[uuid.UUID]:
    """Runs with a webhook whose acknowledged mark is behind their feed and no retry pending
    (for the sweep)."""
    behind = (
        EnvRun.objects.exclude(webhook_url="")
        .filter(webhook_seq__lt=F("reward_seq"))
        .values_list("pk", flat=True)
    )
    return [run_id for run_id in behind if cache.get(_retrying_key(run_id)) is None]
