"""The keys of the style counts: one answer's, and a battle's ``conv_metadata``.

One answer's counts (``counts.style_counts``) are ``{"tokens": int, "header_count": {h1..h6},
"list_count": {ordered, unordered}, "bold_count": {"**", "__"}}``. A battle's ``conv_metadata``
(the public arena schema, kept on each vote) sums each side's answers over its turns under
``sum_assistant_a_tokens``, ``header_count_a``, ... ``bold_count_b``; a flat battle table has
one integer column per key (the nested parts summed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict


class AnswerStyle(TypedDict):
    """Style counts of one answer."""

    tokens: int
    header_count: dict[str, int]
    list_count: dict[str, int]
    bold_count: dict[str, int]


#: The four style elements LMArena controls for, in reporting order.
STYLE_ELEMENTS: tuple[str, ...] = ("length", "header", "list", "bold")

#: Per element: its key in one answer's counts and the parts of that key (None: one integer).
ANSWER_KEYS: Mapping[str, tuple[str, tuple[str, ...] | None]] = {
    "length": ("tokens", None),
    "header": ("header_count", ("h1", "h2", "h3", "h4", "h5", "h6")),
    "list": ("list_count", ("ordered", "unordered")),
    "bold": ("bold_count", ("**", "__")),
}


def _battle_key(answer_key: str, side: str) -> str:
    return f"sum_assistant_{side}_tokens" if answer_key == "tokens" else f"{answer_key}_{side}"


#: Flat columns holding each side's summed counts, per style element: ``(side a, side b)``.
STYLE_COLUMNS: Mapping[str, tuple[str, str]] = {
    element: (_battle_key(key, "a"), _battle_key(key, "b"))
    for element, (key, _) in ANSWER_KEYS.items()
}

#: The keys of ``conv_metadata`` and their nested parts (summed into a flat column; None: an
#: integer already).
CONV_METADATA_KEYS: Mapping[str, tuple[str, ...] | None] = {
    _battle_key(key, side): parts for key, parts in ANSWER_KEYS.values() for side in ("a", "b")
}


def _summed(answers: Iterable[AnswerStyle]) -> dict[str, Any]:
    total: dict[str, Any] = {
        key: 0 if parts is None else dict.fromkeys(parts, 0) for key, parts in ANSWER_KEYS.values()
    }
    for counts in answers:
        for key, parts in ANSWER_KEYS.values():
            if parts is None:
                total[key] += counts[key]  # type: ignore[literal-required]
            else:
                for part in parts:
                    total[key][part] += counts[key][part]  # type: ignore[literal-required]
    return total


def conv_metadata(a: Iterable[AnswerStyle], b: Iterable[AnswerStyle]) -> dict[str, Any]:
    """A battle's ``conv_metadata``: each side's answer counts summed over its turns."""
    out: dict[str, Any] = {}
    for side, answers in (("a", a), ("b", b)):
        total = _summed(answers)
        for key, _ in ANSWER_KEYS.values():
            out[_battle_key(key, side)] = total[key]
    return out
