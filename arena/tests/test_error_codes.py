"""The error vocabulary: every code is an ErrorCode member, and error bodies
and frames are built only by ArenaError."""

import ast
import json
from pathlib import Path

import pytest

from arena.errors import ArenaError, ErrorCode, not_found

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    path
    for folder in ("arena", "config")
    for path in (ROOT / folder).rglob("*.py")
    if "tests" not in path.relative_to(ROOT).parts and "migrations" not in path.parts
)


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
                found.append((path, node))
    return found


def test_arena_error_refuses_a_code_that_is_not_an_error_code():
    with pytest.raises(TypeError):
        ArenaError("invalid", "A bare string is not a code.")  # type: ignore[arg-type]


def test_every_arena_error_in_the_source_names_an_error_code_member():
    calls = _calls("ArenaError")
    assert len(calls) > 30  # the scan sees the services, views, consumer and API
    for path, call in calls:
        code = call.args[0] if call.args else None
        where = f"{path.relative_to(ROOT)}:{call.lineno}"
        if isinstance(code, ast.Attribute):
            assert isinstance(code.value, ast.Name) and code.value.id == "ErrorCode", where
            assert code.attr in ErrorCode.__members__, where
        else:
            # Only arena.api.error_response passes a code through (a parameter typed ErrorCode,
            # checked by ArenaError at run time); nothing passes a string literal.
            assert not isinstance(code, ast.Constant), where
            assert path.name == "api.py", where


def test_no_error_body_is_built_by_hand_outside_arena_errors():
    for path in SOURCES:
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                assert not ({"code", "message"} <= keys or "error" in keys and len(keys) == 1), (
                    f"{path.relative_to(ROOT)}:{node.lineno} builds an error body by hand"
                )


def test_codes_keep_their_strings_on_the_wire():
    error = ArenaError(ErrorCode.PROMPT_TOO_LONG, "Too long.", field="prompt")
    body = json.loads(json.dumps(error.as_dict()))
    assert body == {"error": {"code": "prompt_too_long", "message": "Too long.", "field": "prompt"}}
    frame = json.loads(json.dumps(error.as_frame()))
    assert frame == {
        "type": "error",
        "code": "prompt_too_long",
        "message": "Too long.",
        "field": "prompt",
    }
    assert not_found("Battle").as_dict() == {
        "error": {"code": "not_found", "message": "Battle not found."}
    }
    assert not_found("Battle").as_frame()["field"] is None


def test_the_codes_the_api_document_names_are_error_codes(client):
    document = client.get("/api/openapi.json").json()
    described = document["components"]["schemas"]["ErrorDetailOut"]["properties"]
    text = described["code"]["description"]
    named = text.split("e.g.", 1)[1].strip(" .").split(", ")
    assert len(named) > 5
    for code in named:
        assert ErrorCode(code) == code
