"""Unstorable text (a NUL, a lone surrogate) anywhere in a JSON body, refused at the parser with
a 400 naming its dotted path, by the visitor API and the environment API alike (whose bodies'
tests are environment/tests/test_env_inputs.py)."""

import json

import pytest

from arena.errors import ArenaError
from arena.inputs import json_parse, json_unstorable_text


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
