"""Requests to URLs a trainer supplies (a run's webhook), through the arena's guarded client
(``arena.outbound``) under the webhooks' policy, read from the settings.

A trainer names the URL, so without a guard the arena's own network (Redis, PostgreSQL, a
cloud's metadata service, anything on loopback or a private network) would be one webhook away.
Every request therefore goes through ``outbound_post``, which:

- takes ``https`` only (``http`` too when ``ARENA_ENV_WEBHOOK_ALLOW_HTTP`` is on), and refuses
  userinfo (``user:pw@``), whitespace and control characters;
- resolves the host and checks EVERY address (``address_refusal``): loopback, private,
  link-local (the metadata service at 169.254.169.254 among them), multicast, reserved,
  unspecified (0.0.0.0, ::), any address that is not globally routable, and the IPv6 forms that
  embed an IPv4 address (IPv4-mapped and -compatible, 6to4, Teredo, NAT64) are refused, unless
  ``ARENA_ENV_WEBHOOK_ALLOW_HOSTS`` names the host or a network holding the address;
- connects to the address it checked (pinned: a DNS answer that changes between the check and
  the connection cannot move it), while the Host header, TLS SNI and the certificate's check
  use the host name;
- follows no redirect (a 3xx is an answer like any other), reads at most
  ``MAX_RESPONSE_BYTES`` of the body and gives up after ``ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS`` in
  all (connection, TLS, request and answer together), whatever the receiver does.

The check runs when a run is created (``outbound_check``: a refused or unresolvable host is a
400 then) and again at every delivery, since DNS can change after creation. ``outbound_check``
and ``address_refusal`` open no connection, so their decisions can be tested alone. Names are
resolved through ``resolve_host`` (``socket.getaddrinfo``), the one network call before the
connection; tests replace it.

Proxies in the environment (``HTTPS_PROXY``) are not used: a proxy would connect to the host
itself, after the check.
"""

from __future__ import annotations

from django.conf import settings

from arena import outbound as guard
from arena.outbound import (
    Address,
    Destination,
    OutboundFailed,
    OutboundRefused,
    OutboundResponse,
    OutboundUnresolved,
    Resolver,
    resolve_host,
    url_shown,
)

__all__ = [
    "MAX_RESPONSE_BYTES",
    "Destination",
    "OutboundFailed",
    "OutboundRefused",
    "OutboundResponse",
    "OutboundUnresolved",
    "Resolver",
    "address_refusal",
    "outbound_check",
    "outbound_post",
    "resolve_host",
    "url_shown",
]

# A receiver's answer is only its status: a few KB of the body are read (for the log), no more.
MAX_RESPONSE_BYTES = 4096


def webhook_policy() -> guard.OutboundPolicy:
    """The webhooks' policy, as the settings say now."""
    return guard.OutboundPolicy(
        allow_http=settings.ARENA_ENV_WEBHOOK_ALLOW_HTTP,
        allow_hosts=tuple(settings.ARENA_ENV_WEBHOOK_ALLOW_HOSTS),
        timeout_seconds=float(settings.ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS),
        allow_http_by="ARENA_ENV_WEBHOOK_ALLOW_HTTP",
        allow_hosts_by="ARENA_ENV_WEBHOOK_ALLOW_HOSTS",
    )


def address_refusal(address: Address | str) -> str | None:
    """Why a webhook may not go to ``address``, or None (``arena.outbound.address_refusal``)."""
    return guard.address_refusal(address, allow_hosts=tuple(settings.ARENA_ENV_WEBHOOK_ALLOW_HOSTS))


def outbound_check(url: str, *, resolve: Resolver | None = None) -> Destination:
    """``arena.outbound.outbound_check`` under the webhooks' policy. The host is resolved
    through this module's ``resolve_host`` unless ``resolve`` is given (tests replace it)."""
    return guard.outbound_check(url, policy=webhook_policy(), resolve=resolve or resolve_host)


def outbound_post(
    url: str,
    *,
    body: bytes,
    headers: dict[str, str],
    resolve: Resolver | None = None,
) -> OutboundResponse:
    """POST ``body`` to ``url`` through the guard under the webhooks' policy; the receiver's
    status and the start of its body. Raises ``OutboundRefused`` or ``OutboundFailed``."""
    return guard.outbound_request(
        "POST",
        url,
        policy=webhook_policy(),
        max_bytes=MAX_RESPONSE_BYTES,
        body=body,
        headers=headers,
        resolve=resolve or resolve_host,
    )
