"""Pseudonymous identities: voter ids, salted IP hashes and user-agent classes."""

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
