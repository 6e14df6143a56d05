"""The model registry's catalogue fields (shown on the model pages) are edited in the admin."""

import datetime

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from arena.models import ArenaModel
from arena.tests.factories import ArenaModelFactory

pytestmark = pytest.mark.django_db

CATALOGUE_FIELDS = ("license", "outputs_reuse", "parameter_size", "release_date", "context_length")


@pytest.fixture
def staff_client():
    user = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    client = Client()
    client.force_login(user)
    return client


def _form_data(model: ArenaModel, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "slug": model.slug,
        "display_name": model.display_name,
        "organization": model.organization,
        "license": model.license,
        "generation_params": "{}",
        "aliases": "[]",
        "system_prompt": "",
        "sampling_weight": 1.0,
        "is_active": "on",
        "is_public": "on",
        "outputs_reuse": "",
        "parameter_size": "",
        "release_date": "",
        "context_length": "",
    }
    data.update(changes)
    return data


def test_change_form_offers_the_catalogue_fields(staff_client):
    model = ArenaModelFactory()
    response = staff_client.get(reverse("admin:arena_arenamodel_change", args=[model.pk]))
    form = response.context["adminform"].form
    for name in CATALOGUE_FIELDS:
        assert name in form.fields
    assert [c[0] for c in form.fields["outputs_reuse"].choices] == [
        "",
        "allowed",
        "restricted",
        "forbidden",
    ]


def test_staff_saves_the_catalogue_fields(staff_client):
    model = ArenaModelFactory()
    response = staff_client.post(
        reverse("admin:arena_arenamodel_change", args=[model.pk]),
        _form_data(
            model,
            license="Apache-2.0",
            outputs_reuse="restricted",
            parameter_size="8x22B",
            release_date="2024-04-17",
            context_length="65536",
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    model.refresh_from_db()
    assert model.license == "Apache-2.0"
    assert model.outputs_reuse == "restricted"
    assert model.get_outputs_reuse_display() == "Allowed with restrictions"
    assert model.parameter_size == "8x22B"
    assert model.release_date == datetime.date(2024, 4, 17)
    assert model.context_length == 65536


def test_catalogue_fields_are_optional_and_a_bad_length_is_refused(staff_client):
    model = ArenaModelFactory()
    url = reverse("admin:arena_arenamodel_change", args=[model.pk])
    assert staff_client.post(url, _form_data(model)).status_code == 302
    model.refresh_from_db()
    assert (model.outputs_reuse, model.parameter_size, model.release_date) == ("", "", None)
    response = staff_client.post(url, _form_data(model, context_length="-5"))
    assert response.status_code == 200
    assert "context_length" in response.context["adminform"].form.errors
