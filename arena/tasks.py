"""Celery tasks of the battle side, under their registered names: the live battles' sweep
(``arena.live.sweep``)."""

import logging

from celery import shared_task

from arena.live.sweep import live_battles_sweep

logger = logging.getLogger(__name__)


@shared_task(  # type: ignore[untyped-decorator]
    name="arena.tasks.live_battles_sweep",
    soft_time_limit=60,
    time_limit=90,
    acks_late=True,
    ignore_result=True,
)
def live_battles_sweep_task() -> int:
    """Settle live battles a stopped server left streaming; a rerun finds nothing more to do."""
    settled = live_battles_sweep()
    if settled:
        logger.warning("settled %d live battles left streaming", settled)
    return settled
