"""A visitor's prompt as the leaderboard compares it: normalised text and its stored hash.

The one owner of what makes two live prompts "the same prompt" for the leaderboard's
down-sampling of repeated prompts (``arena.selectors.votes_for_rating``): the live battle service
stores ``prompt_text_hash`` of the first turn on the visitor's ``Prompt`` (``Prompt.text_hash``),
and the refit groups the votes by it in SQL, so both refit paths read the same groups.
"""

from __future__ import annotations

import hashlib
import unicodedata


def _is_edge(char: str) -> bool:
    """Whitespace or punctuation (any Unicode category ``P*``: ``!?.,"'()`` and the like)."""
    return char.isspace() or unicodedata.category(char).startswith("P")


def prompt_normalise(text: str) -> str:
    """``text`` as repeated prompts are recognised: "Hello!", " hello " and "ＨＥＬＬＯ" are one.

    In this order:

    1. Unicode NFKC (compatibility forms fold: full-width letters, ligatures, ``①`` to ``1``);
    2. case-folded (``str.casefold``: "Straße" and "STRASSE" match), then NFKC again, since
       case folding can leave text that is not NFKC;
    3. every run of whitespace (spaces, tabs, newlines, any Unicode space) becomes one space;
    4. punctuation and whitespace at either end are stripped ("hi!!!" and "¿hi?" are "hi");
       punctuation inside the text is kept ("what's 2+2" stays as it is).

    Symbols (``+``, emoji) are not punctuation and stay. A text of only punctuation and
    whitespace normalises to ``""``.
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    collapsed = " ".join(folded.split())
    start, end = 0, len(collapsed)
    while start < end and _is_edge(collapsed[start]):
        start += 1
    while end > start and _is_edge(collapsed[end - 1]):
        end -= 1
    return collapsed[start:end]


def prompt_text_hash(text: str) -> str:
    """SHA-256 (hex) of ``prompt_normalise(text)`` in UTF-8: what ``Prompt.text_hash`` stores."""
    return hashlib.sha256(prompt_normalise(text).encode("utf-8")).hexdigest()
