"""Checks on untrusted input shared by the HTTP API and the websocket.

JSON is parsed with a nesting limit: Python's parser recurses, so a body or frame nested about
a thousand deep raises ``RecursionError`` instead of a ``ValueError``, and nothing the arena
takes is nested more than a few levels. Text must be storable: PostgreSQL refuses the NUL
character in text, and a lone surrogate (JSON's ``"\\ud800"``) is not a Unicode character and
cannot be encoded as UTF-8. ``json_parse`` refuses both anywhere in a document, keys included,
naming the first by its dotted path, so that no parser of a body or a frame (the visitor API,
the environment API, the websocket) lets one reach a field, a service or the database.
"""

import json
import re
from typing import Any

from django.utils.translation import gettext, gettext_noop

from arena.errors import ArenaError, ErrorCode

MAX_JSON_DEPTH = 20  # frames and bodies are flat objects; pool lines nest two or three deep

_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# The phrases callers pass to ``json_parse`` as ``what``: marked here for the catalogue, and
# translated when a message is built, whoever passed them.
PARSED_WHATS = (gettext_noop("The request body"), gettext_noop("The frame"))


def json_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects more than ``limit`` deep."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def json_parse(data: str | bytes, *, what: str, field: str) -> Any:
    """``data`` parsed, or an ``ArenaError`` naming ``field`` (``what`` is the phrase for it,
    e.g. "The frame", one of ``PARSED_WHATS``) when it is not JSON or nests more than
    ``MAX_JSON_DEPTH`` deep."""
    what = gettext(what)
    too_deep = ArenaError(
        ErrorCode.INVALID_JSON,
        gettext("%(what)s is nested more than %(depth)s levels deep.")
        % {"what": what, "depth": MAX_JSON_DEPTH},
        field=field,
    )
    try:
        value = json.loads(data)
    except RecursionError:
        raise too_deep from None
    except ValueError:  # UnicodeDecodeError included
        raise ArenaError(
            ErrorCode.INVALID_JSON,
            gettext("%(what)s is not valid JSON.") % {"what": what},
            field=field,
        ) from None
    if json_too_deep(value):
        raise too_deep
    bad = json_unstorable_text(value)
    if bad is not None:
        path, problem = bad
        named = path or field
        raise ArenaError(
            ErrorCode.INVALID,
            gettext("%(field)s %(problem)s.") % {"field": named, "problem": problem},
            field=named,
        )
    return value


def json_unstorable_text(value: Any) -> tuple[str, str] | None:
    """The first string of parsed JSON, in document order and keys included, that is not
    storable text: its dotted path and its problem (``text_problem``, phrased after the path),
    or None.

    The path names array items by index (``references.0``, ``completions.2.meta.note``); a bad
    key is named by the path of the object holding it ("" for the top level), since the key
    itself is the text that cannot be shown or stored.
    """
    # Each entry: a value and its path, or (for a key) the key and its object's path.
    stack: list[tuple[Any, str, bool]] = [(value, "", False)]
    while stack:
        item, path, is_key = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                if is_key:
                    problem = gettext("has a key that %(problem)s") % {"problem": problem}
                return path, problem
        elif isinstance(item, dict):
            entries: list[tuple[Any, str, bool]] = []
            for key, child in item.items():
                entries += [(key, path, True), (child, f"{path}.{key}" if path else key, False)]
            stack.extend(reversed(entries))
        elif isinstance(item, list):
            stack.extend(
                (child, f"{path}.{index}" if path else str(index), False)
                for index, child in reversed(list(enumerate(item)))
            )
    return None


def text_problem(value: str) -> str | None:
    """What makes ``value`` unstorable as text, phrased for a message, or None."""
    if "\x00" in value:
        return gettext("holds a NUL character")
    if _SURROGATE.search(value):
        return gettext("holds an unpaired surrogate (not a Unicode character)")
    return None


def text_storable(value: str) -> str:
    """``value`` with each NUL and lone surrogate replaced by U+FFFD, for text not typed by the
    visitor (a model's answer) that must be kept rather than refused."""
    return _UNSTORABLE.sub("\ufffd", value)
