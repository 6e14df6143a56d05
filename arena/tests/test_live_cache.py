"""The live models and limits a start keeps per process (``arena.pool_cache``, scope "live"):
every change that decides which models may be drawn, or the limits, is seen by the next start,
in this process at once and in another once the shared generation changes."""

import random
import uuid
from datetime import timedelta

import pytest
from django.contrib.admin.sites import AdminSite
from django.core.cache import cache
from django.utils import timezone

from arena import pool_cache
from arena.admin import ProviderAdmin
from arena.errors import ArenaError
from arena.live.breaker import (
    provider_failure_record,
    provider_success_record,
)
from arena.live.draw import draw_pair, named_pair
from arena.live.turns import battle_start_live
from arena.models import ArenaModel, Battle, LiveLimits, Provider
from arena.services.models import model_retire
from arena.tests.factories import ArenaModelFactory, ProviderFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("upstream_clients")]


def live(n: int, provider: Provider | None = None) -> list[ArenaModel]:
    provider = provider or ProviderFactory()
    return [
        ArenaModelFactory(provider=provider, upstream_model_id=f"up-{provider.pk}-{i}")
        for i in range(n)
    ]


def drawn(kept: pool_cache.PoolCache | None = None, n: int = 40) -> set[int]:
    rng = random.Random(3)
    seen: set[int] = set()
    for _ in range(n):
        seen |= {m.pk for m in draw_pair(rng, kept)}
    return seen


def another_process_bumps(scope: pool_cache.Scope = "live") -> None:
    """What another process's ``generation_bump`` leaves here: only the shared token changes."""
    cache.set(pool_cache.GENERATION_KEYS[scope], uuid.uuid4().hex, timeout=None)


def test_a_start_reads_the_models_and_limits_once_until_something_changes(
    django_assert_num_queries,
):
    live(2)
    battle_start_live(session_key="s1", prompt="Hi")
    kept = pool_cache.pool_cache()
    with django_assert_num_queries(0):
        kept.live_models()
        kept.live_limits()


def test_a_model_deactivated_is_not_drawn_by_the_next_start():
    models = live(3)
    assert drawn() == {m.pk for m in models}
    model_retire(model=models[0], reason="Endpoint shut down")  # the admin's action
    assert drawn() == {models[1].pk, models[2].pk}
    models[1].is_active = False
    models[1].save()
    with pytest.raises(ArenaError) as refused:
        battle_start_live(session_key="s", prompt="Hi")
    assert refused.value.code == "no_live_models"


def test_a_provider_tripped_by_the_breaker_is_skipped_at_once_even_mid_request(settings):
    settings.ARENA_LIVE_BREAKER_FAILURES = 1
    failing = live(2)
    healthy = live(2)
    kept = pool_cache.pool_cache()  # what a start holds from its beginning
    assert drawn(kept) == {m.pk for m in failing + healthy}
    provider_failure_record(provider_id=failing[0].provider_id)
    assert drawn(kept) == {m.pk for m in healthy}
    assert drawn() == {m.pk for m in healthy}


def test_a_breaker_closed_by_a_success_or_the_admin_is_drawn_again():
    failing = live(2)
    healthy = live(2)
    provider = failing[0].provider
    provider.breaker_failures = 3
    provider.breaker_open_until = timezone.now() + timedelta(hours=1)
    provider.save()
    assert drawn() == {m.pk for m in healthy}
    provider_success_record(provider_id=provider.pk)  # an update(): no signal
    assert drawn() >= {m.pk for m in failing}
    Provider.objects.filter(pk=provider.pk).update(
        breaker_open_until=timezone.now() + timedelta(hours=1)
    )
    another_process_bumps()  # that process tripped it
    assert drawn() == {m.pk for m in healthy}
    ProviderAdmin(Provider, AdminSite()).reset_breaker(
        _admin_request(), Provider.objects.filter(pk=provider.pk)
    )
    assert drawn() >= {m.pk for m in failing}


def _admin_request():
    from django.contrib.messages.storage.fallback import FallbackStorage
    from django.test import RequestFactory

    request = RequestFactory().post("/admin/")
    request.session = {}  # type: ignore[attr-defined]
    request._messages = FallbackStorage(request)  # type: ignore[attr-defined]
    return request


def test_a_limits_change_is_seen_by_the_next_start(settings):
    live(2)
    assert battle_start_live(session_key="s1", prompt="Hi").max_tokens == (
        settings.ARENA_LIVE_MAX_OUTPUT_TOKENS
    )
    LiveLimits.objects.create(pk=1, max_output_tokens=7, max_prompt_chars=5)
    assert battle_start_live(session_key="s2", prompt="Hi").max_tokens == 7
    with pytest.raises(ArenaError) as refused:
        battle_start_live(session_key="s3", prompt="123456")
    assert refused.value.code == "prompt_too_long"
    LiveLimits.objects.filter(pk=1).update(max_output_tokens=9)  # no signal here
    assert battle_start_live(session_key="s4", prompt="Hi").max_tokens == 7, "the copy is kept"
    another_process_bumps()
    assert battle_start_live(session_key="s5", prompt="Hi").max_tokens == 9
    LiveLimits.objects.all().delete()
    settings.ARENA_LIVE_MAX_OUTPUT_TOKENS = 11
    assert battle_start_live(session_key="s6", prompt="Hi").max_tokens == 11


def test_a_change_in_another_process_is_seen_once_the_shared_generation_changes():
    models = live(3)
    assert drawn() == {m.pk for m in models}
    ArenaModel.objects.filter(pk=models[0].pk).update(is_active=False)  # no signal here
    assert models[0].pk in drawn(), "this process still holds its copy"
    another_process_bumps("pool")  # a model's save there starts a new pool generation
    assert drawn() == {models[1].pk, models[2].pk}
    Provider.objects.filter(pk=models[1].provider_id).update(
        breaker_open_until=timezone.now() + timedelta(hours=1)
    )
    another_process_bumps()
    with pytest.raises(ArenaError) as refused:
        draw_pair(random.Random(1))
    assert refused.value.code == "no_live_models"


def test_a_write_without_any_signal_is_seen_once_the_live_copy_is_too_old(monkeypatch):
    models = live(3)
    now = [1000.0]
    monkeypatch.setattr(pool_cache.time, "monotonic", lambda: now[0])
    assert drawn() == {m.pk for m in models}
    ArenaModel.objects.filter(pk=models[0].pk).update(is_active=False)
    now[0] += pool_cache.MAX_AGE_SECONDS - 1
    assert models[0].pk in drawn()
    now[0] += 1
    assert drawn() == {models[1].pk, models[2].pk}


def test_named_models_come_from_the_kept_list_and_are_the_requests_own():
    first, second = live(2)
    a, b = named_pair([second.slug, first.slug])
    assert (a.pk, b.pk) == (second.pk, first.pk)
    a.display_name = "changed by one request"
    again, _ = named_pair([second.slug, first.slug])
    assert again.display_name == second.display_name
    ArenaModel.objects.filter(pk=first.pk).update(is_public=False)
    another_process_bumps("pool")
    with pytest.raises(ArenaError) as refused:
        named_pair([second.slug, first.slug])
    assert refused.value.field == "models"
    assert Battle.objects.count() == 0
