import json

import pytest
from django.test import Client

from redteam.models import PlayerProfile

pytestmark = pytest.mark.django_db


def _client():
    client = Client(enforce_csrf_checks=True)
    client.get("/")
    return client, client.cookies["csrftoken"].value


def _post(client, token, body):
    return client.post(
        "/api/redteam/profile",
        json.dumps(body),
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )


def test_a_visitor_opts_in_under_a_pseudonym():
    client, token = _client()
    response = _post(client, token, {"pseudonym": "Mallory", "on_board": True})
    assert response.status_code == 200
    assert PlayerProfile.objects.get().on_board is True


def test_a_taken_pseudonym_is_a_400_naming_the_field():
    PlayerProfile.objects.create(player_id="someone", pseudonym="Mallory")
    client, token = _client()
    response = _post(client, token, {"pseudonym": "Mallory", "on_board": True})
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "pseudonym"


def test_a_too_short_pseudonym_is_refused():
    client, token = _client()
    assert (
        _post(client, token, {"pseudonym": "x", "on_board": True}).json()["error"]["field"]
        == "pseudonym"
    )


def test_a_post_without_the_csrf_token_is_refused():
    client, _ = _client()
    assert _post(client, "", {"pseudonym": "Mallory", "on_board": True}).status_code == 403


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "pseudonym"),
        ({"pseudonym": 7, "on_board": True}, "pseudonym"),
        ({"pseudonym": "Mallory", "on_board": "yes"}, "on_board"),
        ({"pseudonym": "Mallory", "on_board": None}, "on_board"),
        ({"pseudonym": "Mallory"}, "on_board"),
    ],
)
def test_a_missing_or_mistyped_field_is_a_400_naming_it(body, field):
    client, token = _client()
    response = _post(client, token, body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert not PlayerProfile.objects.exists()
