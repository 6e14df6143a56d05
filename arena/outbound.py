"""Requests to URLs someone else names, through one guarded client.

A URL a trainer (a run's webhook) or a pool file (an image reference) names could otherwise
reach the arena's own network: Redis, PostgreSQL, a cloud's metadata service, anything on
loopback or a private network. Every such request goes through ``outbound_request``, which:

- takes ``https`` only (``http`` too when the policy allows it), and refuses userinfo
  (``user:pw@``), whitespace and control characters;
- resolves the host and checks EVERY address (``address_refusal``): loopback, private,
  link-local (the metadata service at 169.254.169.254 among them), multicast, reserved,
  unspecified (0.0.0.0, ::), any address that is not globally routable, and the IPv6 forms that
  embed an IPv4 address (IPv4-mapped and -compatible, 6to4, Teredo, NAT64) are refused, unless
  the policy's allow-list names the host or a network holding the address;
- connects to the address it checked (pinned: a DNS answer that changes between the check and
  the connection cannot move it), while the Host header, TLS SNI and the certificate's check
  use the host name;
- follows no redirect (a 3xx is an answer like any other), reads at most the caller's number of
  bytes of the body and gives up after the policy's timeout in all (connection, TLS, request
  and answer together), whatever the other end does.

What a caller may reach is its ``OutboundPolicy``: the webhooks' comes from the settings
(``environment.outbound``), the pool import's from its command's options. ``outbound_check``
and ``address_refusal`` open no connection, so their decisions can be tested alone. Names are
resolved through ``resolve_host`` (``socket.getaddrinfo``), the one network call before the
connection; tests replace it.

Proxies in the environment (``HTTPS_PROXY``) are not used: a proxy would connect to the host
itself, after the check.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

# The connection's own bound, within the total one (a host that never answers a SYN).
CONNECT_SECONDS = 3.0

_HOST_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?)+$")
# IPv6 ranges that carry an IPv4 address (the IPv4-mapped and -compatible forms are found by
# ipaddress itself, and ::/96 holds the compatible ones); a connection to one of them may end at
# the IPv4 address it embeds, so they are refused rather than unwrapped.
_EMBEDDING_NETWORKS = (
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible (deprecated)
    ipaddress.IPv6Network("::ffff:0:0/96"),  # IPv4-mapped
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64, well-known prefix
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # NAT64, local-use prefix
    ipaddress.IPv6Network("2002::/16"),  # 6to4
    ipaddress.IPv6Network("2001::/32"),  # Teredo
)
# RFC 1918 and unique local addresses; ipaddress's is_private holds documentation and other
# ranges too, named below by the checks that follow (reserved, not publicly routable).
_PRIVATE_NETWORKS = (
    ipaddress.IPv4Network("10.0.0.0/8"),
    ipaddress.IPv4Network("172.16.0.0/12"),
    ipaddress.IPv4Network("192.168.0.0/16"),
    ipaddress.IPv6Network("fc00::/7"),
)
_METADATA_ADDRESSES = (
    ipaddress.IPv4Address("169.254.169.254"),
    ipaddress.IPv6Address("fd00:ec2::254"),
)


class OutboundRefused(Exception):
    """The guard refuses the URL or an address its host resolves to; the message says why, in
    words a trainer can act on."""


class OutboundFailed(Exception):
    """An allowed request did not complete: no resolution, connection, TLS, time, protocol."""


class OutboundUnresolved(OutboundFailed):
    """The host did not resolve (a refusal at creation, a failure to retry at delivery)."""


@dataclass(frozen=True)
class OutboundPolicy:
    """What a caller's requests may reach and how long they may take."""

    allow_http: bool
    # Host names, and addresses or networks (10.0.0.0/8), the address checks let through.
    allow_hosts: tuple[str, ...]
    timeout_seconds: float
    # How the operator changes each, as the refusals name it (a setting, a command's option).
    allow_http_by: str
    allow_hosts_by: str


@dataclass(frozen=True)
class Destination:
    """A URL the guard accepts, with the addresses it checked (connected to in order)."""

    scheme: Literal["http", "https"]
    host: str  # lower case, IDNA-encoded; an IPv6 address without brackets
    port: int
    target: str  # path and query, as sent in the request line
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class OutboundResponse:
    status: int
    body: bytes  # at most the bytes the caller asked for


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, for TCP (the network edge; tests replace it)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OutboundUnresolved(f"the host {host!r} does not resolve ({exc})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def url_shown(url: str) -> str:
    """``url`` as the arena shows it: its userinfo, if any (older rows may hold one), masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = urlsplit(url.replace("[", "").replace("]", ""))
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


@functools.lru_cache(maxsize=8)
def _allow_list_parsed(
    entries: tuple[str, ...],
) -> tuple[frozenset[str], tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]]:
    names: set[str] = set()
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            names.add(entry.strip().lower().rstrip("."))
    return frozenset(names), tuple(networks)


def address_refusal(address: Address | str, *, allow_hosts: tuple[str, ...] = ()) -> str | None:
    """Why the guard refuses to connect to ``address`` (a phrase naming its kind), or None when
    it is a public address or inside a network of ``allow_hosts``."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    _, networks = _allow_list_parsed(allow_hosts)
    if any(ip.version == network.version and ip in network for network in networks):
        return None
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if isinstance(ip, ipaddress.IPv6Address) and (
        ip.ipv4_mapped is not None
        or ip.sixtofour is not None
        or ip.teredo is not None
        or any(ip in network for network in _EMBEDDING_NETWORKS)
    ):
        return "an IPv6 address that embeds an IPv4 address"
    if ip in _METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if any(ip in network for network in _PRIVATE_NETWORKS):
        return "a private address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "an address that is not publicly routable"
    return None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _parsed(url: str, policy: OutboundPolicy) -> tuple[Literal["http", "https"], str, int, str]:
    if not isinstance(url, str) or not url:
        raise OutboundRefused("the URL is empty")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise OutboundRefused("the URL holds whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [ of an IPv6 address
        raise OutboundRefused("the URL is not a valid URL") from None
    scheme = parts.scheme.lower()
    allowed = ("https", "http") if policy.allow_http else ("https",)
    if scheme not in allowed:
        raise OutboundRefused(
            "the URL must be https"
            + (
                ""
                if policy.allow_http
                else f" (this arena sends no plain http: {policy.allow_http_by})"
            )
        )
    if "@" in parts.netloc:
        raise OutboundRefused("the URL must not hold a user name or password (user:pw@)")
    host = (parts.hostname or "").rstrip(".")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise OutboundRefused("the URL's port is not a number from 1 to 65535") from None
    if not host or port == 0:
        raise OutboundRefused("the URL has no host" if not host else "the URL's port is 0")
    if not _is_address(host):
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise OutboundRefused(f"the host {host!r} is not a valid host name") from None
        if not _HOST_NAME.match(host):
            raise OutboundRefused(f"the host {host!r} is not a valid host name")
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return scheme, host, port, target  # type: ignore[return-value]


def outbound_check(
    url: str, *, policy: OutboundPolicy, resolve: Resolver | None = None
) -> Destination:
    """The destination of ``url`` if ``policy`` allows it, having resolved its host and checked
    every address; opens no connection. Raises ``OutboundRefused`` (with the reason) or
    ``OutboundUnresolved``."""
    scheme, host, port, target = _parsed(url, policy)
    names, _ = _allow_list_parsed(policy.allow_hosts)
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [str(literal)]
    else:
        addresses = (resolve or resolve_host)(host, port)
        if not addresses:
            raise OutboundUnresolved(f"the host {host!r} does not resolve")
    if host not in names:
        for address in addresses:
            refusal = address_refusal(address, allow_hosts=policy.allow_hosts)
            if refusal is not None:
                shown = host if literal is not None else f"{host} resolves to {address},"
                raise OutboundRefused(
                    f"{shown} {refusal}, which this arena does not send to "
                    + (
                        ""
                        if literal is not None
                        else "(every address a host resolves to is checked) "
                    )
                    + f"unless its operator allows it ({policy.allow_hosts_by})"
                )
    return Destination(scheme, host, port, target, tuple(addresses))


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to ``address``, whatever ``host`` (the Host header's) resolves to."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.seconds = timeout
        self.raw: socket.socket | None = None

    def connect(self) -> None:
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        self.raw = sock
        sock.settimeout(min(CONNECT_SECONDS, self.seconds))
        try:
            sock.connect((self.address, self.port))
        except OSError:
            sock.close()  # close() of the connection only knows a connected socket
            raise
        sock.settimeout(self.seconds)
        self.sock = sock


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The system's CAs, certificate and host name checked: loaded once per process."""
    return ssl.create_default_context()


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    default_port = 443

    def connect(self) -> None:
        super().connect()
        self.sock = _tls_context().wrap_socket(self.sock, server_hostname=self.host)


def outbound_request(
    method: Literal["GET", "POST"],
    url: str,
    *,
    policy: OutboundPolicy,
    max_bytes: int,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    resolve: Resolver | None = None,
) -> OutboundResponse:
    """Send ``method`` to ``url`` through the guard (see the module docstring); the answer's
    status and at most ``max_bytes`` of its body. Raises ``OutboundRefused`` or
    ``OutboundFailed``."""
    destination = outbound_check(url, policy=policy, resolve=resolve)
    seconds = float(policy.timeout_seconds)
    deadline = time.monotonic() + seconds
    connection_class = (
        _PinnedHTTPSConnection if destination.scheme == "https" else _PinnedHTTPConnection
    )
    failure = "no address"
    for address in destination.addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        connection = connection_class(
            destination.host, destination.port, address=address, timeout=remaining
        )
        # The total bound: reads that each arrive in time (a receiver that drips its answer)
        # end when the socket is shut at the deadline.
        expired = threading.Event()

        def cut(
            connection: _PinnedHTTPConnection = connection, expired: threading.Event = expired
        ) -> None:
            expired.set()
            if connection.raw is not None:
                try:
                    socket.socket.shutdown(connection.raw, socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(remaining, cut)
        timer.daemon = True
        timer.start()
        try:
            try:
                connection.connect()
            except OSError as exc:
                failure = f"{address}: {type(exc).__name__}: {exc}"
                continue
            # Once connected, this address is the one: a second POST elsewhere would be a
            # second delivery.
            try:
                connection.request(
                    method,
                    destination.target,
                    body=body,
                    headers={**(headers or {}), "Connection": "close"},
                )
                response = connection.getresponse()
                content = response.read(max_bytes)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                if expired.is_set():
                    raise OutboundFailed(f"no answer within {seconds:g} seconds") from None
                raise OutboundFailed(f"{type(exc).__name__}: {exc}") from None
            if expired.is_set():
                # The cut socket reads as the end of the answer: what came is not all of it.
                raise OutboundFailed(f"no answer within {seconds:g} seconds")
            return OutboundResponse(status=response.status, body=content)
        finally:
            timer.cancel()
            connection.close()
    if time.monotonic() >= deadline:
        raise OutboundFailed(f"no connection within {seconds:g} seconds")
    raise OutboundFailed(f"could not connect ({failure})")
