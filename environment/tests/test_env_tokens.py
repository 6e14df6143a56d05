"""API tokens: created with scopes and shown once, stored as a hash, authenticated, revoked; the
command and the admin."""

import hashlib
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from arena.errors import ArenaError
from arena.models import ApiToken
from arena.tokens import (
    PREFIX_CHARS,
    TOKEN_PREFIX,
    token_authenticate,
    token_create,
    token_find,
    token_require_scope,
    token_revoke,
)
from environment.models import EnvRun
from environment.runs import env_run_create

pytestmark = pytest.mark.django_db


def test_a_token_is_stored_as_its_hash_and_its_prefix_only(db):
    token, raw = token_create(name="trainer", scopes=["env", "export"])
    assert raw.startswith(TOKEN_PREFIX) and len(raw) > 40
    token.refresh_from_db()
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert token.prefix == raw[:PREFIX_CHARS]
    stored = [str(value) for value in ApiToken.objects.values_list().get()]
    assert not any(raw in value for value in stored)
    assert token.scopes == ["env", "export"]


def test_two_tokens_differ(db):
    assert token_create(name="a", scopes=["env"])[1] != token_create(name="a", scopes=["env"])[1]


def test_a_token_authenticates_as_itself(db):
    token, raw = token_create(name="trainer", scopes=["env"])
    assert token_authenticate(raw) == token


@pytest.mark.parametrize("raw", ["", "arena_", "Bearer x", "arena_" + "A" * 43, "x" * 500])
def test_anything_else_is_401(db, raw):
    token_create(name="trainer", scopes=["env"])
    with pytest.raises(ArenaError) as error:
        token_authenticate(raw)
    assert error.value.status == 401 and error.value.code == "unauthorized"


def test_a_token_one_character_off_is_401(db):
    _, raw = token_create(name="trainer", scopes=["env"])
    off = raw[:-1] + ("A" if raw[-1] != "A" else "B")
    with pytest.raises(ArenaError):
        token_authenticate(off)


def test_a_revoked_token_is_401_and_revoking_twice_keeps_the_first_time(db):
    token, raw = token_create(name="trainer", scopes=["env"])
    assert token_revoke(token=token) is True
    first = token.revoked_at
    assert first is not None
    assert token_revoke(token=token) is False
    assert ApiToken.objects.get().revoked_at == first
    with pytest.raises(ArenaError) as error:
        token_authenticate(raw)
    assert error.value.status == 401 and "revoked" in error.value.message


def test_a_scope_missing_is_403(db):
    token, _ = token_create(name="exports", scopes=["export"])
    token_require_scope(token=token, scope="export")
    with pytest.raises(ArenaError) as error:
        token_require_scope(token=token, scope="env")
    assert error.value.status == 403


@pytest.mark.parametrize(
    ("name", "scopes", "field"),
    [
        ("", ["env"], "name"),
        ("x" * 101, ["env"], "name"),
        ("t", [], "scope"),
        ("t", ["admin"], "scope"),
    ],
)
def test_a_token_needs_a_name_and_known_scopes(db, name, scopes, field):
    with pytest.raises(ArenaError) as error:
        token_create(name=name, scopes=scopes)
    assert error.value.field == field
    assert not ApiToken.objects.exists()


def test_last_use_is_written_at_most_once_a_minute(db, frozen_clock):
    token, raw = token_create(name="trainer", scopes=["env"])
    token_authenticate(raw)
    first = ApiToken.objects.get().last_used_at
    assert first is not None
    frozen_clock.shift(59)
    token_authenticate(raw)
    assert ApiToken.objects.get().last_used_at == first
    frozen_clock.shift(2)
    token_authenticate(raw)
    assert ApiToken.objects.get().last_used_at > first


def test_a_token_is_found_by_id_prefix_or_whole(db):
    token, raw = token_create(name="trainer", scopes=["env"])
    assert token_find(prefix_or_id=str(token.pk)) == token
    assert token_find(prefix_or_id=token.prefix) == token
    assert token_find(prefix_or_id=raw) == token
    with pytest.raises(ArenaError) as error:
        token_find(prefix_or_id="arena_nothing")
    assert error.value.status == 404


# --- the command ----------------------------------------------------------------------------


def _call(*args: str) -> str:
    out = StringIO()
    call_command("api_token", *args, stdout=out)
    return out.getvalue()


def test_the_command_prints_the_token_once_and_stores_its_hash(db):
    output = _call("create", "--name", "grpo box", "--scope", "env", "--scope", "export")
    (raw,) = re.findall(r"arena_[A-Za-z0-9_-]{40,}", output)
    token = ApiToken.objects.get()
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert token.name == "grpo box" and token.scopes == ["env", "export"]
    assert token_authenticate(raw) == token
    listing = _call("list")
    assert token.prefix in listing and "grpo box" in listing
    assert raw not in listing and token.key_hash not in listing


def test_the_command_refuses_an_unknown_scope(db):
    with pytest.raises(CommandError):
        _call("create", "--name", "x", "--scope", "admin")
    assert not ApiToken.objects.exists()


def test_the_command_revokes_by_prefix_or_id(db):
    one, raw_one = token_create(name="one", scopes=["env"])
    two, raw_two = token_create(name="two", scopes=["env"])
    assert "Revoked" in _call("revoke", one.prefix)
    assert "Revoked" in _call("revoke", str(two.pk))
    assert "already revoked" in _call("revoke", str(two.pk))
    for raw in (raw_one, raw_two):
        with pytest.raises(ArenaError):
            token_authenticate(raw)
    with pytest.raises(CommandError):
        _call("revoke", "arena_unknown")


# --- the admin ------------------------------------------------------------------------------


def test_the_admin_lists_tokens_without_their_hash_and_revokes_them(admin_client):
    token, raw = token_create(name="trainer", scopes=["env"])
    listing = admin_client.get(reverse("admin:arena_apitoken_changelist"))
    assert listing.status_code == 200
    page = listing.content.decode()
    assert token.prefix in page and token.key_hash not in page and raw not in page
    detail = admin_client.get(reverse("admin:arena_apitoken_change", args=[token.pk]))
    assert detail.status_code == 200 and token.key_hash not in detail.content.decode()
    assert admin_client.get(reverse("admin:arena_apitoken_add")).status_code == 403
    response = admin_client.post(
        reverse("admin:arena_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert response.status_code == 302
    with pytest.raises(ArenaError):
        token_authenticate(raw)


def test_the_admin_shows_a_run_and_closes_it(admin_client):
    token, _ = token_create(name="trainer", scopes=["env"])
    run = env_run_create(token=token, name="grpo-1")
    listing = admin_client.get(reverse("admin:environment_envrun_changelist"))
    assert listing.status_code == 200 and "grpo-1" in listing.content.decode()
    detail = admin_client.get(reverse("admin:environment_envrun_change", args=[run.pk]))
    assert detail.status_code == 200 and run.webhook_secret not in detail.content.decode()
    response = admin_client.post(
        reverse("admin:environment_envrun_changelist"),
        {"action": "close", "_selected_action": [str(run.pk)]},
    )
    assert response.status_code == 302
    assert EnvRun.objects.get().state == "closed"
