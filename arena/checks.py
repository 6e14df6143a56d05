"""System checks that refuse unsafe production combinations."""

from typing import Any

from celery import current_app as app
from django.conf import settings
from django.core.checks import Error, register


@register()
def production_safety(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse production settings that would be unsafe: an in-memory channel layer, a
    per-process cache behind the rate limits, DEBUG, eager Celery tasks.

    The configured cache is what counts: ``arena.cache.FallbackRedisCache`` is the shared Redis
    cache. Its per-process fallback only counts rate limits while Redis is unreachable (each
    worker then limits alone, rather than nobody limiting), and it is left as soon as Redis
    answers again, so it is no per-process cache behind the rate limits in the sense of E002.
    """
    if not getattr(settings, "ARENA_PRODUCTION", False):
        return []
    errors = []
    layer = str(settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", ""))
    if layer.endswith("InMemoryChannelLayer"):
        errors.append(
            Error(
                "The in-memory channel layer cannot be used in production.",
                hint="Set REDIS_URL so channels-redis is used.",
                id="arena.E001",
            )
        )
    cache = str(settings.CACHES.get("default", {}).get("BACKEND", ""))
    if settings.RATELIMIT_ENABLE and cache.endswith(("LocMemCache", "DummyCache")):
        errors.append(
            Error(
                "Rate limits need a shared cache; a per-process cache lets each worker count alone.",
                hint="Set REDIS_URL so the Redis cache is used.",
                id="arena.E002",
            )
        )
    if settings.DEBUG:
        errors.append(Error("DEBUG must be off in production.", id="arena.E003"))
    if settings.CELERY_TASK_ALWAYS_EAGER:
        errors.append(
            Error(
                "Celery tasks must not run eagerly in production.",
                hint="Unset CELERY_TASK_ALWAYS_EAGER.",
                id="arena.E004",
            )
        )
    return errors


@register()
def celery_visibility_timeout(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a broker visibility timeout that a task can outlast.

    Redis hands an unacknowledged task to another worker once the timeout has passed since its
    delivery: a task running longer than that (up to its hard time limit), or waiting longer
    for a retry's countdown, would run twice at once. Every registered task is checked, the
    ratings' refits included: each app registers its tasks when it is ready.
    """
    from arena.tasks import RETRY_COUNTDOWN_MAX

    timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    limits = [(RETRY_COUNTDOWN_MAX, "the longest retry countdown")]
    for name, task in sorted(app.tasks.items()):
        if name.startswith("celery."):
            continue
        limit = task.time_limit or app.conf.task_time_limit
        if limit:
            limits.append((int(limit), f"{name}'s hard time limit"))
    seconds = max(limit for limit, _ in limits)
    if timeout > seconds:
        return []
    # Every cause at the longest limit is named: raising the timeout for one alone would leave
    # the operator to find the next by trial.
    what = " and ".join(what for limit, what in limits if limit == seconds)
    return [
        Error(
            f"The broker's visibility timeout ({timeout} s) does not exceed {what} "
            f"({seconds} s): such a task would be handed to a second worker while it runs.",
            hint=f"Set CELERY_VISIBILITY_TIMEOUT_SECONDS above {seconds}.",
            id="arena.E005",
        )
    ]
