"""Every URL pattern with a parameter, against values no route can take: a NUL, a lone
surrogate and a 10 KB parameter. Each answer is a 4xx (a 404 mostly), never a server error.

PostgreSQL refuses a NUL in any text it is sent, a lookup's included, so a NUL that reaches
a view's query is a 500 there (SQLite takes it); a lone surrogate cannot be encoded for any
database. The walk covers the whole URLconf, resolvers included: the pages, django-ninja's
APIs (their routes are URL patterns too) and the admin, signed in as a superuser so that the
admin's views reach their lookups. Requests go to the ASGI application in process with the
path decoded as uvicorn decodes it (``%00`` is a NUL; the UTF-8 bytes of a surrogate are
invalid and become U+FFFD), and once with the surrogate itself, as a server decoding
differently would hand it on. The walk runs on the database under test; on PostgreSQL (CI) it
is the one where a NUL fails.
"""

import re
from collections.abc import Iterator
from urllib.parse import quote, unquote

import pytest
from asgiref.sync import async_to_sync
from channels.testing import ApplicationCommunicator
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern

from arena.tokens import token_create
from config.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

# What an ASGI server hands on as the parameter: uvicorn's ``unquote`` of the encoded form, and
# a surrogate decoded as such.
BAD_PARAMETERS = {
    "nul": unquote("%00"),
    "nul-inside": unquote("a%00b.png"),
    "surrogate-as-uvicorn-decodes-it": unquote("%ED%A0%80"),
    "lone-surrogate": "\ud800",
    "ten-kilobytes": "x" * 10_240,
}
METHODS = ("GET", "POST")
API_METHODS = ("GET", "POST", "PUT")  # the APIs' reactions are PUT
_ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?\w+>")


def _fill(route: str, value: str) -> str:
    """A route's text with each parameter, a converter's or a regex's named group, ``value``."""
    out, i = [], 0
    while i < len(route):
        if route.startswith("(?P<", i):
            depth, j = 0, i
            while True:
                depth += {"(": 1, ")": -1}.get(route[j], 0)
                j += 1
                if depth == 0:
                    break
            out.append(value)
            i = j
        else:
            out.append(route[i])
            i += 1
    return _ROUTE_PARAMETER.sub(lambda _: value, "".join(out))


def _routes(patterns, prefix: str = "") -> Iterator[str]:
    """Each pattern's route text after its resolvers' (a regex's anchors dropped)."""
    for pattern in patterns:
        text = str(pattern.pattern)
        if isinstance(pattern.pattern, RegexPattern):
            text = text.removeprefix("^").removesuffix("$")
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + text)
        else:
            assert isinstance(pattern, URLPattern)
            yield prefix + text


def paths_with(value: str) -> list[str]:
    """Every pattern with a parameter, as a path with each parameter ``value``."""
    paths = set()
    for route in _routes(get_resolver().url_patterns):
        filled = _fill(route, value)
        if filled != route:
            paths.add("/" + filled)
    return sorted(paths)


def test_the_walk_finds_the_pages_the_apis_and_the_admin():
    paths = paths_with("X")
    for expected in ("/s/X", "/s/X.png", "/models/X", "/api/battles/X/vote"):
        assert expected in paths
    assert "/api/env/v1/runs/X/submissions/X/cancel" in paths
    assert "/admin/arena/battle/X/change/" in paths
    assert "/admin/X/" in paths  # the admin's app index, a regex pattern


@pytest.fixture
def credentials() -> list[tuple[bytes, bytes]]:
    """A superuser's session with its CSRF token, and a bearer token of every scope."""
    staff = Client()
    staff.force_login(get_user_model().objects.create_superuser("walker", password="x"))
    staff.get("/")
    cookies = {name: morsel.value for name, morsel in staff.cookies.items()}
    _, raw = token_create(name="walker", scopes=["env", "export"])
    return [
        (b"host", b"testserver"),
        (b"cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()).encode()),
        (b"x-csrftoken", cookies["csrftoken"].encode()),
        (b"authorization", f"Bearer {raw}".encode()),
        (b"content-type", b"application/json"),
    ]


@async_to_sync
async def served(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> int:
    """The status of ``path`` (decoded, as a server hands it on) over the ASGI application."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 40000),
        "method": method,
        "path": path,
        "raw_path": quote(path, safe="/", errors="surrogatepass").encode(),
        "query_string": b"",
        "headers": headers,
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b"{}"})
    start = await communicator.receive_output(timeout=30)
    assert start["type"] == "http.response.start"
    while (await communicator.receive_output(timeout=30)).get("more_body"):
        pass
    await communicator.wait(timeout=30)
    return start["status"]


@pytest.mark.parametrize("value", BAD_PARAMETERS.values(), ids=BAD_PARAMETERS.keys())
def test_no_path_parameter_is_a_server_error(value, credentials):
    failures = {
        (method, path[:80]): status
        for path in paths_with(value)
        for method in (API_METHODS if path.startswith("/api/") else METHODS)
        if (status := served(method, path, credentials)) >= 500
    }
    assert failures == {}
