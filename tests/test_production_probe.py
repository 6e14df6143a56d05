"""A hostile probe's reproductions, answered by the production shape over HTTP.

The shape is ``tests/test_production_shape.py``'s ``production`` fixture: ``bin/serve`` with two
uvicorn workers under production settings, beat, PostgreSQL and Redis of the test's own, the
demo loaded. Each reproduction is sent as the probe sent it, and the answer is the one the
defences promise (docs/deployment.md): a NUL in a path is a 404, the share page's links name the
configured public origin whatever the Host header, uploads past their bounds are refused before
anything is stored, an address's unattached bytes meet their quota, a form without a boundary is
a 400 logged on one line, and a websocket refused for its Origin logs nothing. The unit tests
beside each defence cover their edges; this shows they hold as deployed.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import urllib.error
import urllib.request
from typing import Any

import pytest
from PIL import Image
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.test_production_rigging import Visitor
from tests.test_production_shape import (  # noqa: F401  (fixtures)
    ProductionShape,
    _read,
    production,
)

pytestmark = [pytest.mark.production, pytest.mark.postgres, pytest.mark.redis]

PUBLIC_ORIGIN = "https://arena.example.org"
# Small enough that a few uploads of a phone-sized image meet it.
SESSION_QUOTA = 200_000


@pytest.fixture
def production_env() -> dict[str, str]:
    return {
        "ARENA_PUBLIC_ORIGIN": PUBLIC_ORIGIN,
        "ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION": str(SESSION_QUOTA),
        "ARENA_RATELIMIT_UPLOADS": "1000/m",
    }


def _png(width: int, height: int, noise: bool = False) -> bytes:
    if noise:
        image = Image.frombytes("RGB", (width, height), secrets.token_bytes(width * height * 3))
    else:
        image = Image.new("L", (width, height))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _upload(visitor: Visitor, data: bytes, content_type: str | None = None) -> tuple[int, Any]:
    """``POST /api/images`` as the page's form sends it (or ``data`` as the whole body, with
    ``content_type``, for a malformed form)."""
    if content_type is None:
        boundary = secrets.token_hex(8)
        body = (
            (
                f"--{boundary}\r\n"
                'Content-Disposition: form-data; name="image"; filename="a.png"\r\n'
                "Content-Type: image/png\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        content_type = f"multipart/form-data; boundary={boundary}"
    else:
        body = data
    csrf = next((c.value for c in visitor.jar if c.name == "csrftoken"), "")
    request = urllib.request.Request(
        visitor.base + "/api/images",
        method="POST",
        data=body,
        headers={"Origin": visitor.base, "X-CSRFToken": csrf, "Content-Type": content_type},
    )
    try:
        with visitor.opener.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _raw_get(shape: ProductionShape, path: str, host: str | None = None) -> tuple[int, str]:
    """A GET whose path is sent as written (urllib would not quote a ``%00`` again)."""
    request = urllib.request.Request(shape.url + path, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _uvicorn_log(shape: ProductionShape) -> str:
    return "".join(_read(p) for p in shape.logs if "uvicorn" in p.name)


def test_the_probes_reproductions_are_answered_as_the_defences_promise(production):  # noqa: F811
    shape, database = production
    visitor = Visitor(shape.url)
    visitor.sign_up()

    # A NUL in a path parameter names no page (PostgreSQL would refuse it in a lookup).
    for path in ("/s/%00", "/s/a%00b.png", "/models/%00", "/api/battles/%00"):
        status, _ = _raw_get(shape, path)
        assert status == 404, path

    # The share page's links are on the configured origin, whatever port the Host names.
    status, battle = visitor.call("POST", "/api/battles", {})
    assert status == 201, battle
    status, voted = visitor.call("POST", f"/api/battles/{battle['id']}/vote", {"winner": "tie"})
    assert status == 201, voted
    status, share = visitor.call(
        "POST", f"/api/battles/{battle['id']}/share", {"include_prompt": False}
    )
    assert status == 201, share
    status, page = _raw_get(shape, share["url"], host="localhost:1")
    assert status == 200
    og = dict(re.findall(r'<meta property="og:(\w+)" content="([^"]*)"', page))
    assert og["url"] == PUBLIC_ORIGIN + share["url"]
    assert og["image"] == PUBLIC_ORIGIN + share["url"] + ".png"
    assert "localhost:1" not in page

    # Pixels and shape are read from the header and refused before a pixel is decoded.
    for width, height in ((5000, 5000), (25_000_000, 1)):
        status, error = _upload(visitor, _png(width, height))
        assert status == 400 and error["error"]["field"] == "image", (width, height, error)

    # A form without a boundary is a 400, logged on one line.
    status, error = _upload(visitor, b"no boundary", content_type="multipart/form-data")
    assert status == 400 and error["error"]["field"] == "body", error

    # The session's unattached bytes meet their quota: a 429 naming it, and nothing past it
    # stored.
    stored = 0
    for _ in range(20):
        status, body = _upload(visitor, _png(160, 160, noise=True))
        if status != 201:
            break
        stored += body["size"]
    assert status == 429 and body["error"]["code"] == "image_quota", body
    assert "ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION" in body["error"]["message"]
    assert stored <= SESSION_QUOTA
    [(rows, total)] = database.query(
        "SELECT count(*), coalesce(sum(size), 0) FROM arena_promptimage WHERE battle_id IS NULL"
    )
    assert rows >= 1 and total == stored

    # A websocket refused for its Origin is refused at the handshake.
    for path in ("/ws/battle", "/ws/redteam"):
        with pytest.raises(InvalidStatus) as refused:
            connect(shape.url.replace("http", "ws") + path, origin="https://evil.example")
        assert refused.value.response.status_code == 403

    log = _uvicorn_log(shape)
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
