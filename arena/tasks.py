"""Celery tasks of the battle side, under their registered names: the live battles' sweep
(``arena.live.sweep``), the sweep of uploaded images no battle took (``arena.live.images``)
and the pool's recognisability figures (``arena.transparency``). The environment API's tasks
are their own app's (``environment.tasks``)."""

import logging

from celery import shared_task

from arena.live.images import prompt_images_sweep
from arena.live.sweep import live_battles_sweep
from arena.transparency import pool_recognisability_refresh

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


@shared_task(  # type: ignore[untyped-decorator]
    name="arena.tasks.prompt_images_sweep",
    soft_time_limit=120,
    time_limit=180,
    acks_late=True,
    ignore_result=True,
)
def prompt_images_sweep_task() -> int:
    """Delete uploaded images no battle took within the hour; a rerun finds nothing more."""
    return prompt_images_sweep()


@shared_task(  # type: ignore[untyped-decorator]
    name="arena.tasks.pool_recognisability",
    soft_time_limit=600,
    time_limit=660,
    acks_late=True,
    ignore_result=True,
)
def pool_recognisability_task() -> int:
    """Compute the pool's recognisability figures for the /transparency page (``arena.
    transparency``); a rerun computes the same figures again. Returns the models counted."""
    return len(pool_recognisability_refresh())


# The longest countdown a retry waits. A task waiting for its countdown is held by a worker as
# delivered and unacknowledged, so this stays below the broker's visibility timeout (checked by
# arena.E005), or Redis would hand the waiting task to a second worker. The environment API's
# tasks (``environment.tasks``) back off up to it.
RETRY_COUNTDOWN_MAX = 10 * 60
