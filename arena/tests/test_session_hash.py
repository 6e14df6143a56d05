"""Battles keep a keyed hash of their visitor's session key, never the key."""

import hashlib
import hmac
import json

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from arena.identity import session_hash
from arena.models import Battle
from arena.tests.factories import pool_of


def _hmac(key: bytes, session_key: str) -> str:
    return hmac.new(key, session_key.encode(), hashlib.sha256).hexdigest()


def _start_pool_battle(client: Client) -> dict:
    response = client.post("/api/battles", data="{}", content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.django_db
def test_a_battle_stores_the_keyed_hash_of_the_session_key_not_the_key(visitor, settings):
    settings.ARENA_SESSION_HASH_KEY = "a-dedicated-key"
    pool_of()
    payload = _start_pool_battle(visitor)
    session_key = visitor.session.session_key
    stored = Battle.objects.get(pk=payload["id"]).session_hash
    assert stored != session_key and session_key not in stored
    assert stored == _hmac(b"a-dedicated-key", session_key)
    # Nothing in the row holds the key.
    row = Battle.objects.filter(pk=payload["id"]).values().get()
    assert not any(session_key in str(value) for value in row.values())


def test_without_a_dedicated_key_the_hash_is_keyed_by_a_key_derived_from_secret_key(settings):
    settings.ARENA_SESSION_HASH_KEY = ""
    settings.SECRET_KEY = "first-secret"
    first = session_hash("k" * 32)
    assert first != _hmac(b"first-secret", "k" * 32)  # not the key used for other hashes
    settings.SECRET_KEY = "second-secret"
    assert session_hash("k" * 32) != first  # unknown without the server's secret
    assert session_hash("") == ""


@pytest.mark.django_db
def test_a_battle_is_found_for_its_own_session_and_not_for_another(visitor, other_visitor):
    pool_of()
    payload = _start_pool_battle(visitor)
    assert visitor.get(f"/api/battles/{payload['id']}").status_code == 200
    assert other_visitor.get(f"/api/battles/{payload['id']}").status_code == 404
    vote = other_visitor.post(
        f"/api/battles/{payload['id']}/vote",
        data=json.dumps({"winner": "tie"}),
        content_type="application/json",
    )
    assert vote.status_code == 404  # as the read: not this session's, so not found
    vote = visitor.post(
        f"/api/battles/{payload['id']}/vote",
        data=json.dumps({"winner": "tie"}),
        content_type="application/json",
    )
    assert vote.status_code == 201


@pytest.mark.django_db
def test_the_admin_never_shows_or_searches_the_session(visitor):
    pool_of()
    payload = _start_pool_battle(visitor)
    session_key = visitor.session.session_key
    stored = Battle.objects.get(pk=payload["id"]).session_hash
    staff = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    admin = Client()
    admin.force_login(staff)
    pages = [
        admin.get(reverse("admin:arena_battle_change", args=[payload["id"]])),
        admin.get(reverse("admin:arena_battle_changelist")),
        admin.get(reverse("admin:arena_vote_changelist")),
    ]
    for page in pages:
        assert page.status_code == 200
        html = page.content.decode()
        assert session_key not in html and stored not in html
    assert payload["id"] in pages[1].content.decode()
    found = admin.get(reverse("admin:arena_battle_changelist"), {"q": session_key})
    assert payload["id"] not in found.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_migration_hashes_the_session_keys_already_stored(settings):
    settings.ARENA_SESSION_HASH_KEY = "migration-key"
    before, after = [("arena", "0002_live_battles")], [("arena", "0003_battle_session_hash")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        model_a = old.get_model("arena", "ArenaModel").objects.create(slug="a", display_name="A")
        model_b = old.get_model("arena", "ArenaModel").objects.create(slug="b", display_name="B")
        old_battle = old.get_model("arena", "Battle")
        common = {"source": "pool", "state": "ready", "model_a": model_a, "model_b": model_b}
        visited = old_battle.objects.create(session_key="s3ss10nk3y" * 3, **common)
        imported = old_battle.objects.create(session_key="", **common)
        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert Battle.objects.get(pk=visited.pk).session_hash == _hmac(
        b"migration-key", "s3ss10nk3y" * 3
    )
    assert Battle.objects.get(pk=visited.pk).session_hash == session_hash("s3ss10nk3y" * 3)
    assert Battle.objects.get(pk=imported.pk).session_hash == ""


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("upstream_clients")
async def test_a_live_battle_keeps_the_hash_and_is_found_for_its_own_socket_only(
    fake_upstream, live_models
):
    from arena.tests.test_consumer_live import FRAME_TIMEOUT, frames_until, get_battle, open_socket

    owner = await open_socket()
    await owner.send_json_to({"type": "start", "prompt": "Whose battle is this?"})
    battle_id = (await frames_until(owner, "turn_end"))[-1]["battle"]["id"]
    stored = (await get_battle(battle_id)).session_hash
    assert stored == session_hash(owner.session_key) and owner.session_key not in stored

    intruder = await open_socket()
    await intruder.send_json_to({"type": "regenerate", "battle_id": battle_id})
    assert (await intruder.receive_json_from(FRAME_TIMEOUT))["code"] == "not_found"
    # The stored hash sent as the session cookie is no session at all.
    forged = await open_socket(session_key=stored)
    await forged.send_json_to({"type": "turn", "battle_id": battle_id, "prompt": "Me too"})
    assert (await forged.receive_json_from(FRAME_TIMEOUT))["code"] == "not_found"

    await owner.send_json_to({"type": "turn", "battle_id": battle_id, "prompt": "And more?"})
    assert (await frames_until(owner, "turn_end"))[-1]["battle"]["state"] == "ready"
    for comm in (owner, intruder, forged):
        await comm.disconnect()
