"""Unstorable text (a NUL, a lone surrogate) in an environment API body, refused at the parser
(``arena.inputs``) with a 400 naming its dotted path, as in the visitor API."""

import json

import pytest
from django.test import Client

from arena.tokens import token_create
from environment.models import EnvRun

UNSTORABLE = ["a\x00b", "a\ud800b", "\udfff"]


@pytest.mark.parametrize("text", UNSTORABLE, ids=["nul", "high", "low"])
def test_an_unstorable_reference_of_a_new_run_is_a_400_naming_it(db, text):
    _, raw = token_create(name="trainer", scopes=["env"])
    response = Client().post(
        "/api/env/v1/runs",
        json.dumps({"name": "x", "references": [text]}),  # ensure_ascii: \u0000, \ud800
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "references.0"
    assert not EnvRun.objects.exists()


def test_an_unstorable_key_in_an_env_body_is_a_400_naming_the_body(db):
    _, raw = token_create(name="trainer", scopes=["env"])
    response = Client().post(
        "/api/env/v1/runs",
        json.dumps({"name": "x", "\x00": 1}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "body"
