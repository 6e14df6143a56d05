"""Template filters of the ratings pages."""

from __future__ import annotations

from typing import Any

from django import template

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
