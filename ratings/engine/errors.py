"""The one error type of the rating engine."""

from __future__ import annotations


class EngineError(ValueError):
    """Bad input to the rating engine.

    ``column`` names the offending column and ``row`` the first offending row (the DataFrame's
    index label) when the problem is in one place, so callers can point at it.
    """

    def __init__(self, message: str, column: str | None = None, row: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column
        self.row = row
