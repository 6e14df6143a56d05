"""Every API answer carries ``Cache-Control: no-store``: battles, votes, terms
and exports belong to one visitor, and errors describe one visitor's request."""

import json

import pytest
from django.contrib.auth import get_user_model

from arena.tests.factories import pool_of

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def assert_no_store(response):
    assert response["Cache-Control"] == "no-store", (response.status_code, response.content)


def test_battles_votes_and_terms_are_not_stored(visitor):
    pool_of(n_models=2, n_prompts=1)
    assert_no_store(post_json(visitor, "/api/terms", {"accept": True}))
    created = post_json(visitor, "/api/battles", {})
    assert created.status_code == 201
    assert_no_store(created)
    battle_id = created.json()["id"]
    assert_no_store(visitor.get(f"/api/battles/{battle_id}"))
    voted = post_json(visitor, f"/api/battles/{battle_id}/vote", {"winner": "tie"})
    assert voted.status_code == 201
    assert_no_store(voted)


def test_errors_under_the_api_are_not_stored(visitor, settings):
    assert_no_store(visitor.get("/api/battles/00000000-0000-0000-0000-000000000000"))  # 404
    assert_no_store(visitor.get("/api/no-such-endpoint"))
    assert_no_store(visitor.get("/api/battles"))  # 405
    assert_no_store(post_json(visitor, "/api/terms", {"accept": "yes"}))  # 400
    settings.RATELIMIT_ENABLE = True
    settings.ARENA_RATELIMIT_BATTLES = "0/d"
    limited = post_json(visitor, "/api/battles", {})
    assert limited.status_code == 429
    assert_no_store(limited)


def test_the_votes_export_is_not_stored(client):
    client.force_login(get_user_model().objects.create_superuser("root", password="x"))
    response = client.get("/api/exports/votes?format=arena")
    assert response.status_code == 200
    assert_no_store(response)


def test_pages_keep_their_own_caching(client):
    assert "no-store" not in client.get("/about").get("Cache-Control", "")
