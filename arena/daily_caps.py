"""Daily caps counted in the cache: how many times an identity (a session, a client address's
salted hash) may do something per UTC day. Votes (``arena.services.vote_guards``) and red-team
attempts (``redteam.services``) count through these.

A count is taken before the action (``incr`` is atomic, every counter in one round trip), so
concurrent actions cannot pass a cap together, and given back when the action then fails. The
counters live in the cache (Redis in production, shared by every worker); while Redis is down
they are counted per process (``arena.cache``), as the rate limits are: the caps keep holding,
each worker counting alone, rather than failing closed or open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core.cache import cache
from django.utils import timezone

from arena.cache import counters_take


@dataclass(frozen=True)
class DailyCap:
    """At most ``cap`` per UTC day under ``name`` (a cache key without the day)."""

    name: str
    cap: int


@dataclass(frozen=True)
class CapsTaken:
    """What ``daily_caps_take`` counted: ``keys`` to give back with ``daily_caps_release`` if
    the action fails; ``over``, the first cap the count went over (then nothing is counted)."""

    keys: list[str]
    over: DailyCap | None = None


def seconds_to_midnight() -> int:
    """Seconds until the next UTC midnight, and a minute more: a daily counter's lifetime."""
    now = timezone.now().astimezone(UTC)
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return int((midnight - now).total_seconds()) + 60


def daily_caps_take(caps: Sequence[DailyCap], *, amount: int = 1) -> CapsTaken:
    """Count ``amount`` (one action, or an upload's bytes) against each cap for today's UTC
    date (a cap of 0 is off and not counted).

    Over any cap, every count is given back and ``over`` names that cap."""
    live = [c for c in caps if c.cap > 0]
    if not live:
        return CapsTaken(keys=[])
    day = timezone.now().astimezone(UTC).date().isoformat()
    keys = [f"{c.name}:{day}" for c in live]
    counts = counters_take(keys, timeout=seconds_to_midnight(), amount=amount)
    for cap, used in zip(live, counts, strict=True):
        if used > cap.cap:
            daily_caps_release(keys, amount=amount)
            return CapsTaken(keys=[], over=cap)
    return CapsTaken(keys=keys)


def daily_caps_release(keys: list[str], *, amount: int = 1) -> None:
    """Give back the counts of an action that did not happen (``amount`` as taken)."""
    for key in keys:
        try:
            cache.decr(key, amount)
        except ValueError:  # expired meanwhile (a new day): nothing to give back
            pass
