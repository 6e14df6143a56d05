"""The leaderboard's categories: which battles each one holds, and its label.

A battle belongs to every category whose rule it meets:

- ``overall``: every rated vote.
- ``coding``: the prompt's category is ``coding``, or a user turn holds a fenced code block.
- ``code-ran``: the visitor ran code of both answers in the browser before voting (the
  vote's ``code_ran``).
- ``long_prompts``: the user turns shown hold ``RATINGS_LONG_PROMPT_CHARS`` characters or more
  in total (500 by default).
- ``multi_turn``: the battle showed more than one user turn.
- ``vision``: the prompt had images (a live battle's uploads); the style counts still read the
  answers' text.
- ``lang-<code>``, one per language present: the prompt's ``language`` field, lowercased and
  without its region (``en-US`` counts as ``en``); ``lang-en`` is "English".

A rule reads the battle table's columns (``ratings.vote_sources.BATTLE_COLUMNS``), in memory or
a Parquet batch at a time, so both refit paths select the same votes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from django.utils.translation import get_language_info

from ratings.category_text import CATEGORY_TEXT, LANGUAGE_DESCRIPTION

CODING_CATEGORY = "coding"


@dataclass(frozen=True)
class Category:
    key: str
    label: str
    description: str
    select: Callable[[pd.DataFrame], pd.Series]


def language_code(value: str) -> str:
    return value.strip().lower().replace("_", "-").split("-")[0]


def _language_label(code: str) -> str:
    try:
        return str(get_language_info(code)["name"])
    except KeyError:
        return code.upper()


def _language_selector(code: str) -> Callable[[pd.DataFrame], pd.Series]:
    def select(df: pd.DataFrame) -> pd.Series:
        return df["language"].map(language_code) == code

    return select


def language_counts(languages: pd.Series) -> dict[str, int]:
    """Votes per language code (``""`` left out), in order of first appearance."""
    codes = languages.map(language_code)
    return {str(code): int(n) for code, n in codes[codes != ""].value_counts(sort=False).items()}


def snapshot_categories(battles: pd.DataFrame, *, long_prompt_chars: int) -> list[Category]:
    """The fixed categories, then one per language present (most votes first)."""
    languages = language_counts(battles["language"]) if len(battles) else {}
    return categories_from_languages(languages, long_prompt_chars=long_prompt_chars)


def categories_from_languages(
    languages: dict[str, int], *, long_prompt_chars: int
) -> list[Category]:
    """The fixed categories, then one per language of ``languages`` (votes per code, in order
    of first appearance): most votes first, ties in order of first appearance."""
    categories = [
        Category(
            "overall",
            *CATEGORY_TEXT["overall"],
            lambda df: df["winner"].notna(),
        ),
        Category(
            "coding",
            *CATEGORY_TEXT["coding"],
            lambda df: (
                (df["prompt_category"].str.lower() == CODING_CATEGORY)
                | df["prompt_has_code"].astype(bool)
            ),
        ),
        Category(
            "code-ran",
            "Code (ran)",
            "Votes cast after running code of both answers in the browser.",
            lambda df: df["code_ran"].astype(bool),
        ),
        Category(
            "long_prompts",
            CATEGORY_TEXT["long_prompts"][0],
            CATEGORY_TEXT["long_prompts"][1] % {"chars": long_prompt_chars},
            lambda df: df["prompt_chars"] >= long_prompt_chars,
        ),
        Category(
            "multi_turn",
            *CATEGORY_TEXT["multi_turn"],
            lambda df: df["turns"] > 1,
        ),
        Category(
            "vision",
            "Vision",
            "Prompts with images.",
            lambda df: df["prompt_has_image"].astype(bool),
        ),
    ]
    for code in sorted(languages, key=lambda c: -languages[c]):  # stable: ties keep their order
        categories.append(
            Category(
                f"lang-{code}",
                _language_label(code),
                LANGUAGE_DESCRIPTION % {"code": repr(code)},
                _language_selector(code),
            )
        )
    return categories
