"""The per-provider circuit breaker of live battles.

After ``ARENA_LIVE_BREAKER_FAILURES`` consecutive failed answers a provider's breaker opens: its
models are skipped when live battles are drawn until the cool-down ends. Then they are drawn
again (half-open); one more failure reopens the breaker at once, one success closes it. Which
providers can be drawn is a read: ``arena.selectors.providers_available``.

Live starts keep the providers' breaker states per process (``arena.pool_cache``, "live"): a
breaker opened is a ``save()``, whose signal starts a new generation; a breaker closed here is an
``update()``, which sends none, so these functions start one themselves (at once, for this
process, and after the commit, for a process that read the old row meanwhile).
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from arena.models import Provider
from arena.pool_cache import generation_bump_now_and_after_commit


def provider_failure_record(*, provider_id: int) -> Provider:
    """Count a failed answer; open the breaker once the failures reach the threshold."""
    with transaction.atomic():
        Provider.objects.filter(pk=provider_id).update(breaker_failures=F("breaker_failures") + 1)
        provider = Provider.objects.select_for_update().get(pk=provider_id)
        if provider.breaker_failures >= settings.ARENA_LIVE_BREAKER_FAILURES:
            cooldown = timedelta(seconds=settings.ARENA_LIVE_BREAKER_COOLDOWN_SECONDS)
            provider.breaker_open_until = timezone.now() + cooldown
            provider.save(update_fields=["breaker_open_until"])
    return provider


def provider_success_record(*, provider_id: int) -> None:
    """A successful answer closes the breaker."""
    closed = (
        Provider.objects.filter(pk=provider_id)
        .filter(Q(breaker_failures__gt=0) | Q(breaker_open_until__isnull=False))
        .update(breaker_failures=0, breaker_open_until=None)
    )
    if closed:
        generation_bump_now_and_after_commit("live")


def provider_breaker_reset(*, provider_ids: list[int]) -> int:
    """Close the breakers of these providers (an admin action)."""
    reset = Provider.objects.filter(pk__in=provider_ids).update(
        breaker_failures=0, breaker_open_until=None
    )
    if reset:
        generation_bump_now_and_after_commit("live")
    return reset
