"""The websocket's Origin check: same origin as the page, scheme, host and port compared.

Channels' ``AllowedHostsOriginValidator`` compares the Origin's host with ``ALLOWED_HOSTS`` and
ignores scheme and port, so a page served from another port of the same host (another program
on the machine, a development server) could open a battle socket with the visitor's cookies.
Here a handshake is accepted when its ``Origin`` is

- the request's own origin: the scheme of the connection (``wss`` counts as ``https``; behind a
  proxy, uvicorn's ``--forwarded-allow-ips`` makes it the visitor's), and the ``Host`` header,
  whose host must also be one of ``ALLOWED_HOSTS`` (as Django requires of every HTTP request:
  a page on a rebinding domain that points at this server does not pass); or
- one of ``CSRF_TRUSTED_ORIGINS`` (``DJANGO_CSRF_TRUSTED_ORIGINS``), compared the same way, a
  ``*.`` host matching the domain and its subdomains as in Django's CSRF check.

Default ports are made explicit before comparing (``http://h`` is ``http://h:80``). A handshake
without an ``Origin`` header is refused: browsers always send one on a websocket, and the only
client of the battle socket is the battle page; a program that is not a browser can send the
header anyway, so accepting its absence would only widen the rule.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # scheme, host, port


def parse_origin(value: str) -> Origin | None:
    """``scheme://host[:port]`` as (scheme, lower-case host, port), or None if it is not one."""
    try:
        parts = urlsplit(value.strip())
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port out of range or not a number
        return None
    if scheme not in DEFAULT_PORTS or not host or port is None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    return scheme, host, port


def own_origin(scope: dict[str, Any], host_header: str) -> Origin | None:
    """The origin the page of this connection was served from, if its Host is allowed."""
    domain, _ = split_domain_port(host_header)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") in ("wss", "https")
    return parse_origin(f"{'https' if secure else 'http'}://{host_header}")


def _trusted(origin: Origin) -> bool:
    scheme, host, port = origin
    for pattern in settings.CSRF_TRUSTED_ORIGINS:
        wildcard = "://*." in pattern
        trusted = parse_origin(pattern.replace("://*.", "://", 1) if wildcard else pattern)
        if trusted is None or trusted[0] != scheme or trusted[2] != port:
            continue
        if host == trusted[1] or (wildcard and host.endswith("." + trusted[1])):
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    raw_origin, raw_host = headers.get(b"origin"), headers.get(b"host")
    if not raw_origin:
        return False
    origin = parse_origin(raw_origin.decode("latin1"))
    if origin is None:
        return False
    if raw_host:
        same = own_origin(scope, raw_host.decode("latin1"))
        if same is not None and same == origin:
            return True
    return _trusted(origin)


class _Denier(WebsocketDenier):  # type: ignore[misc]  # channels is untyped
    """Channels' denier without the channel layer it subscribes to by default: a refused
    handshake reaches nothing (no channel layer, no session, no database), so a Redis that is
    down is not polled, and logged as failing, for every handshake from a foreign page."""

    channel_layer_alias = None


class SameOriginValidator:
    """ASGI middleware for websockets: a handshake from another origin is denied (HTTP 403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator serves websocket connections only")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await _Denier()(scope, receive, send)
