"""The leaderboard categories' words for people: a snapshot stores them in English (its
readers include programs), and the pages word them in their language. Kept apart from
``ratings.categories`` so that a page reads them without loading pandas."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

from django.utils.translation import get_language_info, gettext, gettext_noop

if TYPE_CHECKING:  # the payload's types import the engine (pandas), which a page never loads
    from ratings.payload import ViewReason

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


# Why a category or a view is not rated (``ratings.payload.ViewReason``), by code: the snapshot
# stores the code and its figures, the page words them in its language.
VIEW_REASON_TEXT = {
    "too_few_votes": gettext_noop(
        "Not enough votes yet: %(votes)s of the %(needed)s votes this category needs to be rated."
    ),
    "too_few_models": gettext_noop(
        "Not enough votes yet: this category's votes (%(votes)s) compare fewer than 2 models."
    ),
    "no_comparable_models": gettext_noop(
        "No two models can be rated yet: each model in this view has won every comparison, "
        "lost every one, or not met the others."
    ),
    "fit_failed": gettext_noop(
        "Not enough votes yet to rate this view: its votes do not determine the ratings yet."
    ),
}

# The sentences snapshots before schema 6 stored, read back as their codes (so that a page in
# another language words them too, and an engine exception's text they quoted is not shown).
_OLD_TOO_FEW = re.compile(
    r"Not enough votes yet: (?P<votes>\d+) votes over (?P<models>\d+) models "
    r"\(at least (?P<needed>\d+) votes and 2 models are needed\)\."
)
_OLD_NOT_CONNECTED = "No two models can be rated yet:"
_OLD_FIT_FAILED = "Not enough votes yet to rate this view ("


def view_reason(stored: object) -> ViewReason | None:
    """A category's or a view's stored reason as a code and its figures: a snapshot's
    ``ViewReason``, or an older snapshot's sentence read back; None when there is none, or for a
    sentence this code does not know."""
    if isinstance(stored, dict):
        if stored.get("code") in VIEW_REASON_TEXT:
            return cast("ViewReason", stored)  # written by ratings.services
        return None
    if not isinstance(stored, str) or not stored:
        return None
    old = _OLD_TOO_FEW.fullmatch(stored)
    if old:
        votes, needed = int(old["votes"]), int(old["needed"])
        if votes < needed:
            return {"code": "too_few_votes", "votes": votes, "needed": needed}
        return {"code": "too_few_models", "votes": votes}
    if stored.startswith(_OLD_NOT_CONNECTED):
        return {"code": "no_comparable_models"}
    if stored.startswith(_OLD_FIT_FAILED):
        return {"code": "fit_failed"}
    return None


def view_reason_text(reason: ViewReason) -> str:
    """A reason in words, in the active language (the class name of an engine failure is the
    downloads', never the sentence's)."""
    return gettext(VIEW_REASON_TEXT[reason["code"]]) % {
        "votes": reason.get("votes", 0),
        "needed": reason.get("needed", 0),
    }
