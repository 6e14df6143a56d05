"""A bound on the CPU time one piece of heavy work may take in a web worker.

Work such as decoding and re-encoding an uploaded image runs in the request's own thread, where
it cannot be interrupted from outside. ``CpuBudget`` counts this thread's CPU time
(``time.thread_time``: what the work costs the server, not how long a busy machine took to run
it) and ``check`` raises ``CpuBudgetExceeded`` once it is spent. The work checks it at each
step; ``BudgetedBytesIO`` checks it at each chunk a codec reads or writes, so an encoder that
Pillow drives chunk by chunk (PNG, JPEG, WebP) stops within one chunk of the budget. What a step
costs between two checks is bounded by its own limits (the image's pixels).
"""

from __future__ import annotations

import io
import time

from typing_extensions import Buffer


def _clock() -> float:
    return time.thread_time()


class CpuBudgetExceeded(Exception):
    """The work used its CPU time; what it built so far is to be dropped."""


class CpuBudget:
    """``seconds`` of this thread's CPU time from now; ``check`` raises once they are spent,
    or once ``until`` (a point inside the budget, from ``at``) has passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = _clock()

    def at(self, fraction: float) -> float:
        """The point ``fraction`` of the way through the budget, for ``check(until=...)``."""
        return self.started + self.seconds * fraction

    def check(self, until: float | None = None) -> None:
        limit = self.started + self.seconds if until is None else until
        if _clock() > limit:
            raise CpuBudgetExceeded


class BudgetedBytesIO(io.BytesIO):
    """An in-memory file whose every read and write first checks ``budget`` (up to ``until``)."""

    def __init__(
        self, initial: bytes = b"", *, budget: CpuBudget, until: float | None = None
    ) -> None:
        super().__init__(initial)
        self.budget = budget
        self.until = until

    def read(self, size: int | None = -1, /) -> bytes:
        self.budget.check(self.until)
        return super().read(size)

    def write(self, data: Buffer, /) -> int:
        self.budget.check(self.until)
        return super().write(data)
