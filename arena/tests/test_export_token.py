"""The votes export with an API token: ``Authorization: Bearer <token>`` with the ``export``
scope, checked by the same function as the environment API's (``token_for_request``)."""

import json

import pytest

from arena.models import ApiToken
from arena.tests.factories import ArenaModelFactory
from arena.tokens import token_create, token_revoke

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators"),
]

URL = "/api/exports/votes"


@pytest.fixture
def pair(db):
    return ArenaModelFactory(slug="owl-7b"), ArenaModelFactory(slug="lark-70b")


def bearer(raw: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def test_a_token_with_the_export_scope_downloads_the_export(client, make_vote, pair):
    make_vote(*pair, "model_b", answers=("a", "b"))
    token, raw = token_create(name="exporter", scopes=["export"])
    response = client.get(URL, {"format": "trl"}, **bearer(raw))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = b"".join(response).decode().splitlines()
    assert [json.loads(line)["chosen"][-1]["content"] for line in lines] == ["b"]
    token.refresh_from_db()
    assert token.last_used_at is not None  # a token's use is recorded, as the env API's is


def test_a_tokens_export_names_a_bad_parameter_like_a_staff_one(client, make_vote, pair):
    make_vote(*pair, "model_a")
    _, raw = token_create(name="exporter", scopes=["export"])
    response = client.get(URL, {"format": "csv"}, **bearer(raw))
    assert response.status_code == 400 and response.json()["error"]["field"] == "format"


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer arena_not-a-token-of-this-arena",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "arena_without-a-scheme",
        "",
    ],
)
def test_a_missing_or_unknown_token_is_401_with_the_error_body(client, pair, authorization):
    response = client.get(URL, {"format": "trl"}, HTTP_AUTHORIZATION=authorization)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response["WWW-Authenticate"] == 'Bearer realm="arena"'
    assert response["Cache-Control"] == "no-store"


def test_a_revoked_token_is_401(client, pair):
    token, raw = token_create(name="exporter", scopes=["export"])
    token_revoke(token=token)
    response = client.get(URL, {"format": "trl"}, **bearer(raw))
    assert response.status_code == 401 and "revoked" in response.json()["error"]["message"]


def test_a_token_without_the_export_scope_is_403(client, pair):
    _, raw = token_create(name="trainer", scopes=["env"])
    response = client.get(URL, {"format": "trl"}, **bearer(raw))
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden" and "'export'" in error["message"]


def test_a_token_with_both_scopes_opens_the_export_and_the_env_api(client, pair):
    _, raw = token_create(name="both", scopes=["env", "export"])
    assert client.get(URL, {"format": "trl"}, **bearer(raw)).status_code == 200
    assert (
        client.get(
            "/api/env/v1/runs/00000000-0000-0000-0000-000000000000", **bearer(raw)
        ).status_code
        == 404
    )


def test_an_export_token_does_not_open_the_env_api(client):
    _, raw = token_create(name="exporter", scopes=["export"])
    response = client.get("/api/env/v1/runs/00000000-0000-0000-0000-000000000000", **bearer(raw))
    assert response.status_code == 403 and "'env'" in response.json()["error"]["message"]


def test_a_bad_token_is_refused_even_with_a_staff_session(admin_client, pair):
    # A request that sends a token is the token's: a staff session beside it opens nothing.
    assert admin_client.get(URL, {"format": "trl"}).status_code == 200
    response = admin_client.get(URL, {"format": "trl"}, **bearer("arena_unknown"))
    assert response.status_code == 401
    _, raw = token_create(name="trainer", scopes=["env"])
    assert admin_client.get(URL, {"format": "trl"}, **bearer(raw)).status_code == 403


def test_without_a_token_the_export_is_still_for_staff_and_says_how_else(client, pair):
    response = client.get(URL, {"format": "trl"})
    assert response.status_code == 403
    assert "export scope" in response.json()["error"]["message"]
    assert ApiToken.objects.count() == 0
