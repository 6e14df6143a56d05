"""Template filters of the ratings pages."""

from __future__ import annotations

from django import template

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
