"""The battle sockets one client address may hold open at once, counted across every worker.

Counted in the cache (Redis in production, shared by every worker process; per process while
Redis is down, as the cache's counters are: ``arena.cache``), in slots of wall-clock time: a
socket is counted in the slot it opened in, and every process counts its open sockets again in
each new slot as it begins (``SocketCounts``). The count of an address is the larger of the
current slot's and the previous slot's, so a worker that dies with sockets open (and never
takes them off) inflates its addresses' counts for two slots at most, never for good.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import caches

from arena.cache import counters_take
from arena.identity import ip_hash

SLOT_SECONDS = 60
_KEY_SECONDS = 3 * SLOT_SECONDS  # a slot's count outlives the slot after it


def _key(digest: str, slot: int) -> str:
    return f"arena:ws-sockets:{digest}:{slot}"


def current_slot(now: float | None = None) -> int:
    return int((time.time() if now is None else now) // SLOT_SECONDS)


@dataclass(eq=False)
class SocketTicket:
    """One open socket's place in its address's counts: the slots it is counted in."""

    digest: str
    slots: set[int] = field(default_factory=set)


def socket_admit(client_ip: str | None) -> SocketTicket | None:
    """Count a new socket from this address; its ticket, or None when the address already holds
    ``ARENA_WS_MAX_PER_ADDRESS`` sockets (nothing is counted then). Without an address or a cap,
    a ticket that counts nothing."""
    cap = settings.ARENA_WS_MAX_PER_ADDRESS
    if not cap or not client_ip:
        return SocketTicket(digest="")
    digest = ip_hash(client_ip)
    slot = current_slot()
    (now_count,) = counters_take([_key(digest, slot)], _KEY_SECONDS)
    before = caches["default"].get(_key(digest, slot - 1)) or 0
    # The previous slot's sockets still open are counted in this one once every process has
    # counted them again (at the slot's start); until then the previous slot's count stands.
    if max(now_count, int(before) + 1) > cap:
        _take_off(digest, [slot])
        return None
    return SocketTicket(digest=digest, slots={slot})


def socket_release(ticket: SocketTicket) -> None:
    """Take a closed socket off its address's counts (the slots that still count)."""
    if not ticket.digest:
        return
    live = current_slot() - 1
    _take_off(ticket.digest, [slot for slot in ticket.slots if slot >= live])


def sockets_recount(tickets: list[SocketTicket], slot: int) -> None:
    """Count these open sockets (of one process) in ``slot`` too, one add per address."""
    per_address: dict[str, list[SocketTicket]] = {}
    for ticket in tickets:
        if ticket.digest and slot not in ticket.slots:
            per_address.setdefault(ticket.digest, []).append(ticket)
    backend = caches["default"]
    for digest, held in per_address.items():
        key = _key(digest, slot)
        backend.add(key, 0, timeout=_KEY_SECONDS)
        backend.incr(key, len(held))
        for ticket in held:
            ticket.slots.add(slot)


def _take_off(digest: str, slots: list[int]) -> None:
    backend = caches["default"]
    for slot in slots:
        try:
            backend.decr(_key(digest, slot))
        except ValueError:  # expired meanwhile: nothing left to take off
            pass
