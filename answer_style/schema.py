"""The keys of the style counts: one answer's, and a battle's ``conv_metadata``.

One answer's counts (``counts.style_counts``) are ``{"tokens": int, "header_count": {h1..h6},
"list_count": {ordered, unordered}, "bold_count": {"**", "__"}}``. A battle's ``conv_metadata``
(the public arena schema, kept on each vote) sums each side's answers over its turns under
``sum_assistant_a_tokens``, ``header_count_a``, ... ``bold_count_b``; a flat battle table has
one integer column per key (the nested parts summed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, TypedDict


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


class ConvMetadata(TypedDict):
    """A battle's ``conv_metadata``: each side's answer counts summed over its turns."""

    sum_assistant_a_tokens: int
    header_count_a: dict[str, int]
    list_count_a: dict[str, int]
    bold_count_a: dict[str, int]
    sum_assistant_b_tokens: int
    header_count_b: dict[str, int]
    list_count_b: dict[str, int]
    bold_count_b: dict[str, int]


_NESTED_KEYS: tuple[Literal["header_count", "list_count", "bold_count"], ...] = (
    "header_count",
    "list_count",
    "bold_count",
)


def _zeros(element: str) -> dict[str, int]:
    return dict.fromkeys(ANSWER_KEYS[element][1] or (), 0)


def _summed(answers: Iterable[AnswerStyle]) -> AnswerStyle:
    total = AnswerStyle(
        tokens=0,
        header_count=_zeros("header"),
        list_count=_zeros("list"),
        bold_count=_zeros("bold"),
    )
    for counts in answers:
        total["tokens"] += counts["tokens"]
        for key in _NESTED_KEYS:
            for part in total[key]:
                total[key][part] += counts[key][part]
    return total


def conv_metadata(a: Iterable[AnswerStyle], b: Iterable[AnswerStyle]) -> ConvMetadata:
    """A battle's ``conv_metadata``: each side's answer counts summed over its turns."""
    sum_a, sum_b = _summed(a), _summed(b)
    return {
        "sum_assistant_a_tokens": sum_a["tokens"],
        "header_count_a": sum_a["header_count"],
        "list_count_a": sum_a["list_count"],
        "bold_count_a": sum_a["bold_count"],
        "sum_assistant_b_tokens": sum_b["tokens"],
        "header_count_b": sum_b["header_count"],
        "list_count_b": sum_b["list_count"],
        "bold_count_b": sum_b["bold_count"],
    }
