"""The limits of live battles, enforced when a turn is planned.

The limits themselves are read by a selector (``arena.selectors.live_limits``: the admin's
*Live battle limits* or the ``ARENA_LIVE_*`` settings); here they are applied: the prompt's
length, the model calls per client address (``ARENA_RATELIMIT_LIVE``) and the battles one
session may have streaming at once.
"""

import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from django.utils.translation import gettext

from arena import rows
from arena.errors import ArenaError, ErrorCode
from arena.identity import ip_hash, session_hash
from arena.inputs import text_problem
from arena.models import Battle
from arena.selectors import Limits


def clean_prompt(prompt: object, limits: Limits) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ArenaError(ErrorCode.EMPTY_PROMPT, gettext("Type a prompt first."), field="prompt")
    text = prompt.strip()
    if len(text) > limits.max_prompt_chars:
        raise ArenaError(
            ErrorCode.PROMPT_TOO_LONG,
            gettext("The prompt is %(length)s characters long; the limit is %(limit)s.")
            % {"length": len(text), "limit": limits.max_prompt_chars},
            field="prompt",
        )
    problem = text_problem(text)
    if problem is not None:
        raise ArenaError(
            ErrorCode.INVALID,
            gettext("The prompt %(problem)s.") % {"problem": problem},
            field="prompt",
        )
    return text


_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def check_call_rate(client_ip: str | None) -> None:
    """At most ``ARENA_RATELIMIT_LIVE`` model calls (starts, follow-ups, regenerations) per
    client address, whatever its sessions: a new session is one page load away, model calls
    cost money. A fixed window counted in the cache (Redis in production, shared by every
    worker)."""
    if not settings.RATELIMIT_ENABLE or not client_ip or not settings.ARENA_RATELIMIT_LIVE:
        return
    count, _, unit = str(settings.ARENA_RATELIMIT_LIVE).partition("/")
    period = _PERIODS.get(unit[-1:], 60) * int(unit[:-1] or 1)
    key = f"arena:live-calls:{ip_hash(client_ip)}:{int(time.time() // period)}"
    used = 1 if cache.add(key, 1, timeout=period + 1) else cache.incr(key)
    if used > int(count):
        raise ArenaError(
            ErrorCode.RATE_LIMITED,
            gettext(
                "Too many battles from your network in a short time; wait a minute and try again."
            ),
            status=429,
        )


def _lock_session(session_digest: str) -> None:
    """Serialise the live calls of one session until the transaction ends, so two starts at
    once cannot both pass the concurrency count. SQLite's IMMEDIATE transactions already
    serialise every writer; PostgreSQL takes an advisory lock on the session (named by its
    hash, like everything the database sees of a session)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"arena-live-session:{session_digest}"],
            )


def _streaming_count_sql(connection: BaseDatabaseWrapper, *, excluding: bool) -> str:
    def col(name: str) -> str:
        return rows.column(connection, Battle, name)

    sql = (
        f"SELECT COUNT(*) FROM {rows.table(connection, Battle)} "  # noqa: S608  (metadata names)
        f"WHERE {col('session_hash')} = %s AND {col('source')} IN (%s, %s) "
        f"AND {col('state')} = %s AND {col('updated_at')} >= %s"
    )
    return sql + f" AND NOT ({col('id')} = %s)" if excluding else sql


def _streaming_count(*, digest: str, fresh: datetime, exclude: uuid.UUID | None) -> int:
    """How many of the session's live and mixed battles stream, updated since ``fresh``, but
    ``exclude``: ``Battle.objects.filter(...).exclude(pk=exclude).count()`` by a statement
    written once (``arena.rows``; every start runs it)."""
    database = connections[router.db_for_read(Battle)]
    excluding = exclude is not None
    sql = rows.built(
        database,
        ("limits.streaming_count", excluding),
        lambda: _streaming_count_sql(database, excluding=excluding),
    )
    meta = Battle._meta
    params: list[Any] = [
        digest,
        Battle.Source.LIVE.value,
        Battle.Source.MIXED.value,
        Battle.State.STREAMING.value,
        meta.get_field("updated_at").get_db_prep_value(fresh, database),
    ]
    if exclude is not None:
        params.append(meta.get_field("id").get_db_prep_value(exclude, database))
    with database.cursor() as cursor:
        cursor.execute(sql, params)
        (count,) = cursor.fetchone()
    return int(count)


def check_concurrency(*, session_key: str, limits: Limits, exclude: uuid.UUID | None) -> None:
    digest = session_hash(session_key)
    _lock_session(digest)
    fresh = timezone.now() - timedelta(seconds=settings.ARENA_LIVE_STALE_SECONDS)
    if _streaming_count(digest=digest, fresh=fresh, exclude=exclude) >= (
        limits.max_concurrent_battles
    ):
        raise ArenaError(
            ErrorCode.TOO_MANY_BATTLES,
            gettext(
                "You already have %(count)s battles streaming; let one finish or stop it first."
            )
            % {"count": limits.max_concurrent_battles},
            status=429,
        )
