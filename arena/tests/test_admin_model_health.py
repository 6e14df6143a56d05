"""The admin's model list: each model's health (its provider's breaker, its last failed and
last good live answer), in a fixed number of queries."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from arena.models import Battle, BattleMessage
from arena.tests.factories import ArenaModelFactory, BattleFactory, ProviderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client():
    user = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    client = Client()
    client.force_login(user)
    return client


def _row(client, model) -> str:
    response = client.get(reverse("admin:arena_arenamodel_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index(f"/{model.pk}/change/")
    return html[start : html.index("</tr>", start)]


def _answer(battle, side, **fields):
    BattleMessage.objects.filter(battle=battle, side=side).update(**fields)


def test_a_live_models_row_shows_its_last_error_and_its_last_good_answer(staff_client):
    provider = ProviderFactory()
    live = ArenaModelFactory(provider=provider, upstream_model_id="up-1")
    other = ArenaModelFactory(provider=provider, upstream_model_id="up-2")
    good = BattleFactory(source=Battle.Source.LIVE, model_a=live, model_b=other)
    _answer(good, "a", created_at=timezone.now() - timedelta(hours=3))
    failed = BattleFactory(source=Battle.Source.LIVE, model_a=other, model_b=live)
    _answer(failed, "b", status=BattleMessage.Status.ERROR, error="upstream said 503 busy")

    row = _row(staff_client, live)
    assert "breaker closed" in row
    assert "last ok 3\xa0hours ago" in row
    assert "last error just now: upstream said 503 busy" in row


def test_an_answer_in_a_pool_battle_is_not_a_live_success(staff_client):
    live = ArenaModelFactory(provider=ProviderFactory(), upstream_model_id="up-1")
    BattleFactory(source=Battle.Source.POOL, model_a=live)

    row = _row(staff_client, live)
    assert "no good answer yet" in row and "last ok" not in row


def test_an_open_breaker_shows_until_when_and_the_failures(staff_client):
    provider = ProviderFactory(
        breaker_failures=3, breaker_open_until=timezone.now() + timedelta(minutes=5)
    )
    live = ArenaModelFactory(provider=provider, upstream_model_id="up-1")

    row = _row(staff_client, live)
    until = timezone.localtime(provider.breaker_open_until).strftime("%H:%M")
    assert f"breaker open until {until}, 3 failure(s)" in row
    assert 'class="health-open"' in row


def test_a_breaker_past_its_cool_down_is_half_open(staff_client):
    provider = ProviderFactory(
        breaker_failures=3, breaker_open_until=timezone.now() - timedelta(minutes=1)
    )
    live = ArenaModelFactory(provider=provider, upstream_model_id="up-1")
    assert "breaker half-open" in _row(staff_client, live)


def test_a_pool_only_model_has_no_endpoint_health(staff_client):
    pool_only = ArenaModelFactory()
    row = _row(staff_client, pool_only)
    assert "pool only" in row and "breaker" not in row


def test_the_model_list_reads_the_same_number_of_queries_for_more_models(staff_client):
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert staff_client.get(reverse("admin:arena_arenamodel_changelist")).status_code == 200
        return len(queries)

    for n in range(2):
        ArenaModelFactory(provider=ProviderFactory(), upstream_model_id=f"up-{n}")
    few = count()
    for n in range(2, 8):
        model = ArenaModelFactory(provider=ProviderFactory(), upstream_model_id=f"up-{n}")
        BattleFactory(source=Battle.Source.LIVE, model_a=model)
    assert count() == few


def test_weight_active_and_public_are_edited_from_the_list(staff_client):
    model = ArenaModelFactory(sampling_weight=1.0, is_active=True, is_public=True)
    response = staff_client.post(
        reverse("admin:arena_arenamodel_changelist"),
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": str(model.pk),
            "form-0-sampling_weight": "2.5",
            "form-0-is_active": "on",
            "_save": "Save",
        },
    )
    assert response.status_code == 302
    model.refresh_from_db()
    assert model.sampling_weight == 2.5 and model.is_active and not model.is_public


def test_the_model_list_loads_its_own_stylesheet(staff_client):
    response = staff_client.get(reverse("admin:arena_arenamodel_changelist"))
    assert "css/admin_models.css" in response.content.decode()
