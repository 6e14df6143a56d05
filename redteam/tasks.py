"""The robustness refit task (``redteam.refit``), queued after an attempt ends and swept by beat."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from arena.signals import after_commit


@shared_task(  # type: ignore[untyped-decorator]
    name="redteam.refit",
    soft_time_limit=15 * 60,
    time_limit=16 * 60,
    acks_late=True,
    ignore_result=True,
)
def refit(force: bool = False) -> dict[str, Any]:
    """Write a robustness snapshot if attempts ended since the last one (else a no-op)."""
    from redteam.fits import robustness_refit  # the fit's numpy loads only in the worker

    result = robustness_refit(force=force)
    return {
        "snapshot_id": result.snapshot.pk if result.snapshot else None,
        "created": result.created,
    }


def refit_enqueue() -> None:
    """Queue a refit once the current transaction commits."""
    after_commit(lambda: refit.apply_async())
