"""The HTTP side of the ASGI application: Django's handler, with a request's sync code run in one
thread crossing."""

from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class SyncChainASGIHandler(ASGIHandler):
    """Django's ASGI handler, whose middleware chain, view middleware, view and template
    rendering run together in the request's thread, entered once.

    Django's own handler ends the chain in its async request path, so under ASGI a sync
    middleware chain (the arena's: whitenoise's and django-ratelimit's middlewares are
    sync-only) hands back to the event loop at its end, and CSRF's ``process_view``, the view
    and a template's rendering each cross into the thread again: 6 crossings per request, 3
    here (the request-started signal, the chain, the response's close), ~0.7 ms of CPU less per
    pool battle+vote (bench/results/2026-12-01-votes.md). Every crossing is ``thread_sensitive``: the same
    per-request thread as before, so a request's database connection is borrowed, used and
    returned in one thread as before. An async-capable middleware runs in its sync mode; an
    async-only middleware or an async view would be run through ``async_to_sync`` in the
    thread (the arena has none: the websockets are consumers, outside this handler).
    """

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        self._middleware_chain: Any = sync_to_async(self._middleware_chain, thread_sensitive=True)
