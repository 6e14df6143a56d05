"""Unstorable text (a NUL, a lone surrogate) anywhere in a JSON body, refused at the parser with
a 400 naming its dotted path, by the visitor API and the environment API alike."""

import json

import pytest
from django.test import Client

from arena.errors import ArenaError
from arena.inputs import json_parse, json_unstorable_text
from arena.tokens import token_create
from environment.models import EnvRun

UNSTORABLE = ["a\x00b", "a\ud800b", "\udfff"]


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({"references": ["ok", "a\x00b"]}, "references.1"),
        ({"completions": [{}, {}, {"meta": {"note": "\ud800"}}]}, "completions.2.meta.note"),
        ({"prompt": [{"role": "user", "content": "\udfff"}]}, "prompt.0.content"),
        ({"meta": {"\x00": 1}}, "meta"),
        ({"\ud800": 1}, ""),
        ([{"a": "ok"}, "\x00"], "1"),
    ],
    ids=["list-item", "nested-value", "message", "nested-key", "top-key", "top-list"],
)
def test_the_walker_names_the_dotted_path_of_an_unstorable_string(document, path):
    found = json_unstorable_text(document)
    assert found is not None and found[0] == path


def test_the_walker_names_the_first_unstorable_string_in_document_order():
    document = {"a": ["ok", {"b": "\x00"}], "c": "\ud800", "\x00": 1}
    assert json_unstorable_text(document) == ("a.1.b", "holds a NUL character")


def test_the_walker_finds_nothing_in_storable_json():
    assert json_unstorable_text({"a": ["é", {"b": "😀", "n": 1.5}], "c": None}) is None


def test_json_parse_refuses_an_unstorable_key_at_the_top_naming_the_field_it_was_given():
    with pytest.raises(ArenaError) as refused:
        json_parse(json.dumps({"\ud800": 1}), what="The frame", field="frame")
    assert refused.value.field == "frame" and "key" in refused.value.message


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
