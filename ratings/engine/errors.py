"""The error types of the rating engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .provisional import Provisional


class EngineError(ValueError):
    """Bad input to the rating engine.

    ``column`` names the offending column and ``row`` the first offending row (the DataFrame's
    index label; ``read_battles`` labels rows 1, 2, ... in file order) when the problem is in
    one place, so callers can point at it.
    """

    def __init__(self, message: str, column: str | None = None, row: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column
        self.row = row


class CannotRateError(EngineError):
    """The battles are valid but do not determine ratings: not a bug, not enough data yet.

    Raised when fewer than two models can be rated (``provisional`` then lists every model
    with its record and reason), when there are no battles at all, and when a fit has no
    maximum (e.g. style features that separate the outcomes in a handful of battles).
    """

    def __init__(self, message: str, provisional: tuple[Provisional, ...] = ()) -> None:
        super().__init__(message)
        self.provisional = provisional
