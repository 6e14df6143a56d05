import logging
import time
from collections.abc import Callable, Iterator

import pytest
import time_machine
from django.test import Client

from arena.api import VOTER_SESSION_KEY
from arena.services.terms import terms_accept
from arena.signals import vote_recorded


@pytest.fixture
def visitor(db) -> Client:
    """A browser-like client that has opened the battle page and accepted the terms."""
    client = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Test")
    client.get("/")
    terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
    return client


@pytest.fixture
def other_visitor(db) -> Client:
    client = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Other")
    client.get("/")
    terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
    return client


@pytest.fixture
async def upstream_clients():
    """Closes the upstream HTTP clients this test's event loop opened (and their sockets)."""
    from arena.live.upstream import close_clients

    yield
    await close_clients()


@pytest.fixture
def frozen_clock() -> Iterator[time_machine.Traveller]:
    """The wall clock stands still at the moment the test starts (the monotonic clock runs on).

    django-ratelimit counts in windows of the wall clock, and the live-call limit keys its count
    by the wall-clock window too; a window can end at any second (django-ratelimit offsets each
    key's window), so a test counting requests could otherwise start again from zero halfway.
    """
    with time_machine.travel(time.time(), tick=False) as traveller:
        yield traveller


class ListenerBroke(Exception):
    """What a receiver of ``vote_recorded`` with a bug raises."""


@pytest.fixture
def broken_vote_listener(caplog) -> Iterator[Callable[[], list[logging.LogRecord]]]:
    """A ``vote_recorded`` receiver that raises, connected for the test; gives the error records
    logged with that exception's traceback."""

    def listener(**kwargs: object) -> None:
        raise ListenerBroke("a listener's bug")

    def failures() -> list[logging.LogRecord]:
        return [
            r
            for r in caplog.records
            if r.levelno >= logging.ERROR
            and r.exc_info
            and isinstance(r.exc_info[1], ListenerBroke)
        ]

    vote_recorded.connect(listener, dispatch_uid="test.broken_vote_listener")
    caplog.set_level(logging.ERROR)
    yield failures
    vote_recorded.disconnect(dispatch_uid="test.broken_vote_listener")
