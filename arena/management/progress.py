"""Progress bars for the management commands: on a terminal only, one per long step.

A bar goes to standard error, and only when standard error is a terminal, so that logs, pipes and
cron mail get the commands' one-line summaries and nothing else.
"""

import sys
from collections.abc import Iterable, Sequence
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def on_terminal() -> bool:
    return sys.stderr.isatty()


def progress(items: Sequence[T], /, *, desc: str) -> Iterable[T]:
    """``items`` with a bar named ``desc`` while they are consumed (a terminal only)."""
    return progress_iter(items, desc=desc, total=len(items), unit="it")


def progress_iter(items: Iterable[T], /, *, desc: str, total: int | None, unit: str) -> Iterable[T]:
    """``progress`` for an iterable whose length is known only as ``total`` (or not at all)."""
    bar: Iterable[T] = tqdm(
        items,
        desc=desc,
        total=total,
        unit=unit,
        file=sys.stderr,
        disable=not on_terminal(),
        leave=False,
    )
    return bar
