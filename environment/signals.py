"""What the environment app's battle source (registered in ``EnvironmentConfig.ready``) tells the
arena's pool cache: whether any run is open, and the receivers that start a new ``env``
generation of ``arena.pool_cache`` when a run's state changes, so every process asks again."""

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from arena.pool_cache import generation_bump_now_and_after_commit
from environment.models import EnvRun


def env_runs_any_open() -> bool:
    """Whether any run is open (kept per process by the pool cache under its ``env`` generation)."""
    return EnvRun.objects.filter(state=EnvRun.State.OPEN).exists()


@receiver(post_save, sender=EnvRun, dispatch_uid="arena.pool_cache.env_run_saved")
@receiver(post_delete, sender=EnvRun, dispatch_uid="arena.pool_cache.env_run_deleted")
def _env_runs_changed(**kwargs: Any) -> None:
    update_fields = kwargs.get("update_fields")
    # A run's counters (reward_seq and the like) change often and say nothing about its state.
    if update_fields is not None and "state" not in update_fields:
        return
    generation_bump_now_and_after_commit("env")
