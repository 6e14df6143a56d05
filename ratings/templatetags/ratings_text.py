"""Template filters of the ratings pages."""

from __future__ import annotations

from typing import Any

from django import template
from django.template.defaultfilters import floatformat

from ratings.category_text import category_description, category_label
from ratings.flag_reasons import flag_reason_label, flag_reason_text

register = template.Library()


@register.filter
def flag_reason(code: str) -> str:
    """A flag code as a sentence: ``{{ reason|flag_reason }}``."""
    return flag_reason_text(str(code))


@register.filter
def flag_label(code: str) -> str:
    """A flag code in a few words: ``{{ reason|flag_label }}``."""
    return flag_reason_label(str(code))


@register.filter
def category_name(category: Any) -> str:
    """A snapshot category's label in the page's language: ``{{ view.category|category_name }}``."""
    return category_label(category)


@register.filter
def category_about(category: Any) -> str:
    """A snapshot category's description in the page's language."""
    return category_description(category)


@register.filter
def percent(share: float | None, digits: int = 1) -> str:
    """A fraction as a percentage with ``digits`` decimals, in the page's language
    (``{{ 0.1234|percent }}``: 12.3%); None (no battles to share) as a dash."""
    if share is None:
        return "–"
    return f"{floatformat(share * 100, digits)}%"


@register.filter
def times(share: float | None, equal: float | None) -> float | None:
    """How many times ``equal`` ``share`` is (``{{ m.share|times:ledger.equal_share }}``), or
    None when either is missing or the equal share is zero."""
    if share is None or not equal:
        return None
    return share / equal
