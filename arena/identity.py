"""Pseudonymous identities: voter ids, keyed hashes of IPs and session keys, user-agent classes."""

import hashlib
import hmac
import re
import uuid

from django.conf import settings

_BOT = re.compile(r"bot|crawl|spider|slurp|curl|wget|python-requests|httpx|headless", re.I)
_MOBILE = re.compile(r"mobile|android|iphone|ipad", re.I)


def voter_id_new() -> str:
    return uuid.uuid4().hex


def ip_hash(ip: str | None) -> str:
    """HMAC-SHA256 of the address with a server-side salt, so the raw IP is never stored and
    hashes cannot be reversed by enumerating the IPv4 space without the salt."""
    if not ip:
        return ""
    salt = (settings.ARENA_IP_HASH_SALT or settings.SECRET_KEY).encode()
    return hmac.new(salt, ip.encode(), hashlib.sha256).hexdigest()[:32]


def _session_hash_key() -> bytes:
    """``ARENA_SESSION_HASH_KEY`` when set, else a key derived from ``SECRET_KEY`` for this one
    purpose (so it is not the key of the IP hash or the exports' judge hash)."""
    configured = settings.ARENA_SESSION_HASH_KEY
    if configured:
        return str(configured).encode()
    return hmac.new(settings.SECRET_KEY.encode(), b"arena.session-hash", hashlib.sha256).digest()


def session_hash(session_key: str | None) -> str:
    """HMAC-SHA256 (hex) of a session key: what a battle stores to know its visitor's session.

    The key itself would let anyone who reads the table (staff, a backup) act as that visitor
    by sending it as the session cookie; the hash cannot be sent back, nor reversed without
    the server's key. "" for no session.
    """
    if not session_key:
        return ""
    message = session_key.encode("utf-8", "surrogatepass")
    return hmac.new(_session_hash_key(), message, hashlib.sha256).hexdigest()


def session_hash_matches(stored: str, session_key: str | None) -> bool:
    """Whether ``stored`` is the hash of this session key (never for a missing key)."""
    return bool(stored and session_key) and hmac.compare_digest(stored, session_hash(session_key))


def user_agent_class(user_agent: str | None) -> str:
    if not user_agent:
        return "unknown"
    if _BOT.search(user_agent):
        return "bot"
    if _MOBILE.search(user_agent):
        return "mobile"
    if user_agent.startswith("Mozilla/"):
        return "browser"
    return "other"
