"""The leaderboard categories' words for people: a snapshot stores them in English (its
readers include programs), and the pages word them in their language. Kept apart from
``ratings.categories`` so that a page reads them without loading pandas."""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import get_language_info, gettext, gettext_noop

# The fixed categories' label and description, in English in the snapshot (its readers include
# programs); ``category_label`` and ``category_description`` word them for the page.
CATEGORY_TEXT = {
    "overall": (gettext_noop("Overall"), gettext_noop("Every anonymous, unflagged vote.")),
    "coding": (
        gettext_noop("Coding"),
        gettext_noop("Prompts in the coding category or holding a fenced code block."),
    ),
    "long_prompts": (
        gettext_noop("Long prompts"),
        gettext_noop("User turns of %(chars)s characters or more in total."),
    ),
    "multi_turn": (
        gettext_noop("Multi-turn"),
        gettext_noop("Battles over more than one user turn."),
    ),
}
LANGUAGE_DESCRIPTION = gettext_noop("Prompts whose language is %(code)s.")


def _field(category: Any, name: str) -> str:
    """A field of a snapshot's category entry (a dict) or of a row read from one."""
    value = category.get(name, "") if isinstance(category, dict) else getattr(category, name, "")
    return str(value or "")


def category_label(category: Any) -> str:
    """A snapshot category's label in the active language (a language category by the
    language's name in it); one this code does not know keeps its stored label."""
    key = _field(category, "key")
    if key in CATEGORY_TEXT:
        return gettext(CATEGORY_TEXT[key][0])
    if key.startswith("lang-"):
        try:
            return str(get_language_info(key[len("lang-") :])["name_translated"])
        except KeyError:
            pass
    return _field(category, "label") or key


def category_description(category: Any) -> str:
    """A snapshot category's description in the active language; the long prompts' threshold
    is the one the snapshot was computed with (read from its stored description)."""
    key = _field(category, "key")
    stored = _field(category, "description")
    if key == "long_prompts":
        chars = re.search(r"\d+", stored)
        if chars:
            return gettext(CATEGORY_TEXT[key][1]) % {"chars": chars.group()}
        return stored
    if key in CATEGORY_TEXT:
        return gettext(CATEGORY_TEXT[key][1])
    if key.startswith("lang-"):
        return gettext(LANGUAGE_DESCRIPTION) % {"code": repr(key[len("lang-") :])}
    return stored
