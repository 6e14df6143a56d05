"""How often a request crosses between the event loop and a thread under ASGI.

Django's ASGI handler runs sync code through asgiref's adapters: ``sync_to_async`` (the event
loop hands a call to the request's thread) and ``async_to_sync`` (the other way). Each crossing
costs CPU (~0.1 ms on the 2-vCPU VM), so their count per request is pinned here.

The arena's handler (config/handlers.py) runs the middleware chain, the view middleware and the
view in one crossing: 3 per request (the request-started signal, the chain, the response's
close), whatever the middlewares' async capability. Django's own handler crosses 6 times with
the arena's middleware (the chain, then back to the loop for the view's dispatch: CSRF's
``process_view``, the view), and 18 if the chain runs async (every ``MiddlewareMixin``
middleware crossing for ``process_request`` and for ``process_response``): bench/results/2026-12-01-votes.md,
"Where the time goes".
"""

import json
from collections.abc import Iterator

import pytest
from asgiref import sync
from channels.testing import HttpCommunicator
from django.core.handlers.asgi import ASGIHandler

from arena.tests.factories import pool_of
from config.asgi import application
from config.handlers import SyncChainASGIHandler

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# The request-started signal's receivers, the middleware chain with the view, the response's close.
MAX_CROSSINGS = 3

USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36"


@pytest.fixture
def crossings(monkeypatch) -> Iterator[list[str]]:
    """Every asgiref adapter entered, by the name of what it runs."""
    entered: list[str] = []
    to_thread = sync.SyncToAsync.__call__
    to_loop = sync.AsyncToSync.__call__

    async def counted_to_thread(self, *args, **kwargs):
        entered.append(f"sync_to_async {getattr(self.func, '__qualname__', self.func)}")
        return await to_thread(self, *args, **kwargs)

    def counted_to_loop(self, *args, **kwargs):
        entered.append(f"async_to_sync {getattr(self.awaitable, '__qualname__', self.awaitable)}")
        return to_loop(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted_to_thread)
    monkeypatch.setattr(sync.AsyncToSync, "__call__", counted_to_loop)
    yield entered


class Visitor:
    """A browser's cookies and CSRF header, over the ASGI application in process."""

    def __init__(self, app) -> None:
        self.app = app
        self.cookies: dict[str, str] = {}

    async def request(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = [(b"host", b"testserver"), (b"user-agent", USER_AGENT.encode())]
        if self.cookies:
            cookie = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
            headers.append((b"cookie", cookie.encode()))
        if method == "POST":
            headers += [
                (b"content-type", b"application/json"),
                (b"x-csrftoken", self.cookies.get("csrftoken", "").encode()),
            ]
        communicator = HttpCommunicator(
            self.app, method, path, body=json.dumps(body or {}).encode(), headers=headers
        )
        response = await communicator.get_response(timeout=30)
        # The handler closes the response (request_finished: the request's database connection)
        # after sending it; the crossings are counted once it has finished.
        await communicator.wait(timeout=30)
        for name, value in response["headers"]:
            if name.lower() == b"set-cookie":
                key, _, rest = value.decode().partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
        return response


async def served(visitor: Visitor, crossings: list[str], method: str, path: str, body=None):
    """The response, and the adapters entered while serving it."""
    crossings.clear()
    response = await visitor.request(method, path, body)
    return response, list(crossings)


@pytest.fixture
def pool():
    pool_of(n_models=2, n_prompts=1)


async def test_a_page_a_pool_battle_its_vote_and_the_leaderboard_each_cross_at_most_three_times(
    pool, crossings
):
    visitor = Visitor(application)
    page, entered = await served(visitor, crossings, "GET", "/")
    assert page["status"] == 200 and "csrftoken" in visitor.cookies
    assert 1 <= len(entered) <= MAX_CROSSINGS, entered

    terms, _ = await served(visitor, crossings, "POST", "/api/terms", {"accept": True})
    assert terms["status"] < 300, terms["body"]

    battle, entered = await served(visitor, crossings, "POST", "/api/battles")
    assert battle["status"] == 201, battle["body"]
    assert 1 <= len(entered) <= MAX_CROSSINGS, entered

    battle_id = json.loads(battle["body"])["id"]
    vote_path = f"/api/battles/{battle_id}/vote"
    vote, entered = await served(visitor, crossings, "POST", vote_path, {"winner": "tie"})
    assert vote["status"] == 201, vote["body"]
    assert 1 <= len(entered) <= MAX_CROSSINGS, entered

    leaderboard, entered = await served(visitor, crossings, "GET", "/leaderboard")
    assert leaderboard["status"] == 200
    assert 1 <= len(entered) <= MAX_CROSSINGS, entered


async def test_the_chain_is_one_crossing_even_when_every_middleware_is_async_capable(
    settings, crossings
):
    # Without the two sync-only middlewares, Django's own handler would run the chain async and
    # adapt each MiddlewareMixin's hooks one by one.
    settings.MIDDLEWARE = [
        path for path in settings.MIDDLEWARE if "whitenoise" not in path and "ratelimit" not in path
    ]
    page, entered = await served(Visitor(SyncChainASGIHandler()), crossings, "GET", "/")
    assert page["status"] == 200
    assert 1 <= len(entered) <= MAX_CROSSINGS, entered


async def test_djangos_own_handler_crosses_more_for_the_same_page(crossings):
    # What the bound above measures: with Django's handler the view's dispatch crosses again.
    page, entered = await served(Visitor(ASGIHandler()), crossings, "GET", "/")
    assert page["status"] == 200
    assert len(entered) > MAX_CROSSINGS, entered
