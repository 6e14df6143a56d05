"""The Redis cache, made survivable: Redis down is a degraded site, never a 500.

Everything that reads the cache keeps working while Redis is unreachable:

- reads (``get``, ``get_many``, ``has_key``) are misses, writes (``set``, ``delete``, ...) store
  nothing: the ``cached_db`` sessions then read and write the database alone;
- the counters (``add``, ``incr``, ``decr``: the rate limits, the live-call limit, the ratings
  refresh debounce) go to a per-process local-memory cache, so rate limits still hold, counted
  by each worker alone, until Redis returns.

A warning is logged when Redis is first found down and at most once a minute while it stays
down; the first command that succeeds afterwards logs its return. Nothing needs a restart: the
connection pool reconnects on the next command. Keys this process wrote or deleted while Redis
was down (sessions changed in the database meanwhile) are deleted from Redis on its return, so
that a Redis that kept its data through a network split serves no stale session.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.core.cache import caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that mean "Redis cannot be reached now" (BusyLoadingError, a Redis still loading its
# data, is a ConnectionError). Anything else (a wrong type, a bad command) is a bug and raises.
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError)
# Stale keys remembered for deletion on Redis's return, at most this many per process.
_MAX_STALE_KEYS = 10_000


class _ReusedClientCache(RedisCacheClient):
    """Django's Redis cache client, keeping one redis-py client per connection pool.

    Django's own builds a new ``redis.Redis`` for every command, and building one costs ~0.2 ms
    of CPU (its table of response callbacks), several times per request. A client only holds its
    pool, and a pool hands each command a connection of its own, so threads can share one.
    """

    def __init__(self, servers: Any, **options: Any) -> None:
        super().__init__(servers, **options)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        django_client: Any = self  # its private helpers are not in the type stubs
        pool = django_client._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients.setdefault(id(pool), django_client._client(connection_pool=pool))
        return client


class FallbackRedisCache(RedisCache):
    """Django's Redis cache that degrades, instead of raising, while Redis is unreachable.

    ``OPTIONS`` as for ``RedisCache`` (``socket_connect_timeout`` and ``socket_timeout`` bound
    how long a command waits for a Redis that does not answer), plus ``WARNING_INTERVAL``
    (seconds between two warnings while Redis stays down; default 60).
    """

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        params = dict(params)
        options = dict(params.get("OPTIONS") or {})
        self.warning_interval = float(options.pop("WARNING_INTERVAL", 60.0))
        params["OPTIONS"] = options
        super().__init__(server, params)
        self._class = _ReusedClientCache
        self.fallback = LocMemCache(f"arena-fallback-{id(self)}", {"TIMEOUT": self.default_timeout})
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._last_warning = 0.0
        self._stale: set[str] = set()

    # --- outage bookkeeping ---------------------------------------------------------------------
    def _failed(self, exc: BaseException, stale: Iterable[str] = ()) -> None:
        now = time.monotonic()
        with self._lock:
            if self._down_since is None:
                self._down_since = now
            for key in stale:
                if len(self._stale) < _MAX_STALE_KEYS:
                    self._stale.add(key)
            if now - self._last_warning < self.warning_interval:
                return
            self._last_warning = now
        log.warning(
            "Redis cache unreachable (%s: %s): sessions use the database alone and rate limits "
            "are counted per process until it returns",
            type(exc).__name__,
            exc,
        )

    def _succeeded(self) -> None:
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is None:
                return
            down_for = time.monotonic() - self._down_since
            self._down_since = None
            self._last_warning = 0.0
            stale, self._stale = self._stale, set()
        log.warning("Redis cache reachable again after %.0f s", down_for)
        if stale:
            try:
                self._cache.delete_many(list(stale))
            except UNAVAILABLE as exc:
                self._failed(exc, stale)

    @property
    def available(self) -> bool:
        """False from a failed command until the next one that succeeds."""
        return self._down_since is None

    def _run(
        self,
        call: Callable[[], T],
        on_failure: Callable[[], T],
        stale: Callable[[], Iterable[str]] | None = None,
    ) -> T:
        """``call()``, or ``on_failure()`` while Redis is unreachable; ``stale`` names the keys
        the call wrote, computed only when it failed (not on every write of a healthy cache)."""
        try:
            result = call()
        except UNAVAILABLE as exc:
            self._failed(exc, stale() if stale is not None else ())
            return on_failure()
        self._succeeded()
        return result

    # --- reads: a miss ----------------------------------------------------------------------------
    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        return self._run(lambda: RedisCache.get(self, key, default, version), lambda: default)

    def get_many(self, keys: Any, version: int | None = None) -> dict[Any, Any]:
        return self._run(lambda: RedisCache.get_many(self, keys, version), dict)

    def has_key(self, key: Any, version: int | None = None) -> bool:
        return self._run(lambda: RedisCache.has_key(self, key, version), lambda: False)

    # --- writes: nothing stored (and the key remembered as stale) ---------------------------------
    def _stale_keys(self, keys: Iterable[Any], version: int | None) -> Callable[[], list[str]]:
        return lambda: [self.make_and_validate_key(key, version=version) for key in keys]

    def set(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> None:
        self._run(
            lambda: RedisCache.set(self, key, value, timeout, version),
            lambda: None,
            self._stale_keys([key], version),
        )

    def set_many(
        self, data: dict[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[Any]:
        return self._run(
            lambda: RedisCache.set_many(self, data, timeout, version),
            lambda: list(data),
            self._stale_keys(data, version),
        )

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        return self._run(lambda: RedisCache.touch(self, key, timeout, version), lambda: False)

    def delete(self, key: Any, version: int | None = None) -> bool:
        self.fallback.delete(key, version)
        return self._run(
            lambda: RedisCache.delete(self, key, version),
            lambda: False,
            self._stale_keys([key], version),
        )

    def delete_many(self, keys: Any, version: int | None = None) -> None:
        keys = list(keys)
        self.fallback.delete_many(keys, version)
        self._run(
            lambda: RedisCache.delete_many(self, keys, version),
            lambda: None,
            self._stale_keys(keys, version),
        )

    def clear(self) -> None:
        self.fallback.clear()
        self._run(lambda: RedisCache.clear(self), lambda: None)

    # --- counters: per process while Redis is down ------------------------------------------------
    def add(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        return self._run(
            lambda: RedisCache.add(self, key, value, timeout, version),
            lambda: self.fallback.add(key, value, timeout, version),
        )

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        return self._run(
            lambda: RedisCache.incr(self, key, delta, version),
            lambda: self.fallback.incr(key, delta, version),
        )

    def decr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        return self.incr(key, -delta, version)

    def count(self, keys: list[str], timeout: int, amount: int = 1) -> list[int]:
        """Add ``amount`` to each counter, creating it with ``timeout`` seconds to live, in one
        round trip (``add`` then ``incr`` takes three: Django's ``incr`` checks first that the
        key exists); the new counts, in order. Per process while Redis is down, as ``incr``."""
        made = [self.make_and_validate_key(key) for key in keys]

        def call() -> list[int]:
            pipeline = self._cache.get_client(write=True).pipeline(transaction=False)
            for key in made:
                pipeline.set(key, 0, ex=timeout, nx=True)
                pipeline.incr(key, amount)
            return [int(n) for n in pipeline.execute()[1::2]]

        return self._run(call, lambda: _count_each(self.fallback, keys, timeout, amount))


def counters_take(keys: list[str], timeout: int, amount: int = 1) -> list[int]:
    """Add ``amount`` to each counter in the default cache (created with ``timeout`` seconds to
    live); the new counts. One round trip on the Redis cache, ``add``/``incr`` on any other."""
    backend = caches["default"]
    if isinstance(backend, FallbackRedisCache):
        return backend.count(keys, timeout, amount)
    return _count_each(backend, keys, timeout, amount)


def _count_each(backend: BaseCache, keys: list[str], timeout: int, amount: int = 1) -> list[int]:
    """``counters_take`` on a cache without pipelines: ``add`` or ``incr`` each key."""
    return [
        amount if backend.add(key, amount, timeout) else backend.incr(key, amount) for key in keys
    ]
