"""CSV cells that a spreadsheet will not run as formulas (OWASP "CSV injection").

Django-free: the ``rate`` command line and the leaderboard download both use it.
"""

from __future__ import annotations

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: object) -> object:
    """A text cell starting with ``= + - @`` (or a tab or carriage return) gets a leading ``'``.

    Only strings are touched: numbers, negative ones included, stay numbers.
    """
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value
