"""The websocket's Origin check compares scheme, host and port: a page on
another port, scheme or host of the machine cannot open a battle socket with the visitor's
cookies; the site's own origin and DJANGO_CSRF_TRUSTED_ORIGINS can."""

import pytest
from channels.testing import WebsocketCommunicator

from arena.origin import parse_origin
from config.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def site(settings):
    settings.ALLOWED_HOSTS = ["127.0.0.1", "arena.example"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://trusted.example", "https://*.partner.example"]


async def handshake(origin: str | None, host: str, scheme: str = "ws") -> bool:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    comm = WebsocketCommunicator(application, "/ws/battle", headers=headers)
    comm.scope["scheme"] = scheme
    connected, _ = await comm.connect()
    if connected:
        await comm.disconnect()
    return connected


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws"),
        ("https://arena.example", "arena.example", "wss"),
        ("http://arena.example", "arena.example:80", "ws"),  # the default port made explicit
        ("HTTPS://Arena.Example:443", "arena.example", "wss"),
        ("https://trusted.example", "arena.example", "wss"),  # DJANGO_CSRF_TRUSTED_ORIGINS
        ("https://eu.partner.example", "arena.example", "wss"),  # a *. trusted origin
        ("https://partner.example", "arena.example", "wss"),  # and its domain, as Django's
    ],
)
async def test_same_origin_and_trusted_origins_are_accepted(origin, host, scheme):
    assert await handshake(origin, host, scheme)


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        ("http://127.0.0.1:9999", "127.0.0.1:8000", "ws"),  # another port of the same host
        ("https://127.0.0.1:8000", "127.0.0.1:8000", "ws"),  # another scheme
        ("http://arena.example", "arena.example", "wss"),  # http page, https site
        ("http://evil.example:8000", "127.0.0.1:8000", "ws"),  # another host
        ("http://evil.example", "evil.example", "ws"),  # a rebinding name: Host not allowed
        ("http://trusted.example", "arena.example", "ws"),  # trusted over https only
        ("https://trusted.example:8443", "arena.example", "wss"),  # trusted on 443 only
        ("https://evilpartner.example", "arena.example", "wss"),  # *. is a whole label
        ("null", "127.0.0.1:8000", "ws"),  # a sandboxed frame or a file
        ("http://127.0.0.1:8000/path", "127.0.0.1:8000", "ws"),  # not an origin
        (None, "127.0.0.1:8000", "ws"),  # no Origin at all
    ],
)
async def test_other_origins_are_refused(origin, host, scheme):
    assert not await handshake(origin, host, scheme)


def test_parse_origin_makes_the_default_port_explicit_and_refuses_non_origins():
    assert parse_origin("http://Example.org") == ("http", "example.org", 80)
    assert parse_origin("https://example.org:8443") == ("https", "example.org", 8443)
    assert parse_origin("http://[::1]:8000") == ("http", "::1", 8000)
    for value in ("null", "", "ftp://example.org", "http://", "http://h:99999", "http://u@h"):
        assert parse_origin(value) is None, value
