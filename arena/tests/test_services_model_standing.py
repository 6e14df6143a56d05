"""A model's standing changes only through its services, each change kept with its time, who
made it and why: a retirement needs a reason, a reactivation and a change of visibility are
recorded too, and the admin goes through the same services (refusing to retire without a
reason)."""

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from arena.errors import ArenaError
from arena.models import ArenaModel, ModelStatusChange
from arena.services.models import (
    model_reactivate,
    model_register,
    model_retire,
    model_visibility_set,
)
from arena.tests.factories import ArenaModelFactory, ProviderFactory

pytestmark = pytest.mark.django_db


def history(model: ArenaModel) -> list[tuple[str, str, str]]:
    return [
        (c.change, c.reason, c.by)
        for c in ModelStatusChange.objects.filter(model=model).order_by("at", "id")
    ]


@pytest.mark.parametrize("reason", ["", "   \n "])
def test_retiring_without_a_reason_is_refused_and_nothing_changes(reason):
    model = ArenaModelFactory()
    with pytest.raises(ArenaError) as refused:
        model_retire(model=model, reason=reason)
    assert refused.value.code == "invalid" and refused.value.field == "reason"
    model.refresh_from_db()
    assert model.is_active and history(model) == []


def test_retiring_records_when_why_and_who_and_a_second_retirement_records_nothing():
    model = ArenaModelFactory()
    when = datetime(2026, 6, 1, 9, tzinfo=UTC)
    change = model_retire(model=model, reason="  Provider  ended the\nendpoint ", by="ana", at=when)
    assert change is not None and change.at == when
    model.refresh_from_db()
    assert not model.is_active
    assert history(model) == [("retired", "Provider ended the endpoint", "ana")]
    assert model_retire(model=model, reason="again") is None
    assert len(history(model)) == 1


def test_reactivating_and_changing_visibility_are_recorded_and_the_history_kept():
    model = ArenaModelFactory(is_public=False)
    model_visibility_set(model=model, public=True, reason="Released", by="ana")
    model_retire(model=model, reason="Superseded by v2", by="ana")
    model_reactivate(model=model, by="bo")
    assert model_reactivate(model=model) is None  # already active: nothing recorded
    assert model_visibility_set(model=model, public=True) is None
    model.refresh_from_db()
    assert model.is_active and model.is_public
    assert history(model) == [
        ("published", "Released", "ana"),
        ("retired", "Superseded by v2", "ana"),
        ("reactivated", "", "bo"),
    ]


def test_the_database_refuses_a_retirement_without_a_reason():
    model = ArenaModelFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelStatusChange.objects.create(
            model=model, change="retired", reason="", at=datetime(2026, 1, 1, tzinfo=UTC)
        )


def test_a_reason_too_long_is_refused_naming_the_field():
    model = ArenaModelFactory()
    with pytest.raises(ArenaError) as refused:
        model_retire(model=model, reason="x" * 501)
    assert refused.value.field == "reason"
    model.refresh_from_db()
    assert model.is_active


def test_add_model_activate_records_the_reactivation():
    provider = ProviderFactory(base_url="http://127.0.0.1:9/v1")
    model = ArenaModelFactory(slug="m", provider=provider, upstream_model_id="up")
    model_retire(model=model, reason="Endpoint down")
    model_register(slug="m", update=True, activate=True)
    model.refresh_from_db()
    assert model.is_active
    assert [c for c, _, _ in history(model)] == ["retired", "reactivated"]
    assert history(model)[-1][2] == "add_model --activate"


# --- The admin: the same services, and no retirement without a reason -----------------------


@pytest.fixture
def staff_client():
    user = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    client = Client()
    client.force_login(user)
    return client


def _change_form(model: ArenaModel, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "slug": model.slug,
        "display_name": model.display_name,
        "organization": model.organization,
        "license": model.license,
        "generation_params": "{}",
        "aliases": "[]",
        "sampling_weight": model.sampling_weight,
        "outputs_reuse": "",
        "is_public": "on",
        "is_active": "on",
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_the_change_form_refuses_to_retire_without_a_reason(staff_client):
    model = ArenaModelFactory()
    url = reverse("admin:arena_arenamodel_change", args=[model.pk])
    response = staff_client.post(url, _change_form(model, is_active=None))
    assert response.status_code == 200
    assert "Say why the model is retired" in response.content.decode()
    model.refresh_from_db()
    assert model.is_active and history(model) == []

    response = staff_client.post(
        url, _change_form(model, is_active=None, status_reason="Licence withdrawn")
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    model.refresh_from_db()
    assert not model.is_active
    assert history(model) == [("retired", "Licence withdrawn", "staff")]

    # Reactivated from the same form, no reason needed; still recorded.
    assert staff_client.post(url, _change_form(model)).status_code == 302
    assert [c for c, _, _ in history(model)] == ["retired", "reactivated"]
    page = staff_client.get(url).content.decode()
    assert "Licence withdrawn" in page and "Reactivated" in page


def test_the_list_refuses_to_retire_and_records_a_change_of_visibility(staff_client):
    model = ArenaModelFactory(sampling_weight=1.0)
    rows = {
        "form-TOTAL_FORMS": "1",
        "form-INITIAL_FORMS": "1",
        "form-0-id": str(model.pk),
        "form-0-sampling_weight": "1.0",
        "_save": "Save",
    }
    response = staff_client.post(reverse("admin:arena_arenamodel_changelist"), rows)
    assert response.status_code == 200
    assert "Retire selected models" in response.content.decode()
    model.refresh_from_db()
    assert model.is_active and model.is_public and history(model) == []

    response = staff_client.post(
        reverse("admin:arena_arenamodel_changelist"), {**rows, "form-0-is_active": "on"}
    )
    assert response.status_code == 302
    model.refresh_from_db()
    assert model.is_active and not model.is_public
    assert history(model) == [("unpublished", "", "staff")]


def test_the_retire_action_asks_for_the_reason_then_retires(staff_client):
    models = [ArenaModelFactory(), ArenaModelFactory()]
    url = reverse("admin:arena_arenamodel_changelist")
    selected = {"action": "retire", "_selected_action": [m.pk for m in models]}
    asked = staff_client.post(url, selected)
    assert asked.status_code == 200 and 'name="reason"' in asked.content.decode()
    empty = staff_client.post(url, {**selected, "apply": "Retire", "reason": "  "})
    assert empty.status_code == 200 and "Say why the models are retired" in empty.content.decode()
    assert ArenaModel.objects.filter(is_active=False).count() == 0

    done = staff_client.post(url, {**selected, "apply": "Retire", "reason": "Deprecated upstream"})
    assert done.status_code == 302
    for model in models:
        assert history(model) == [("retired", "Deprecated upstream", "staff")]
