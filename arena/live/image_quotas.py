"""Today's quotas of an upload's unattached bytes, per session and per address.

An image uploaded but not yet sent with a prompt counts its stored bytes against
``ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION`` and ``ARENA_IMAGE_UNATTACHED_BYTES_PER_IP`` for
the UTC day (a 429 ``image_quota`` naming the one it would pass); a battle that takes it gives
them back. Counted in the cache (Redis in production), as the daily caps are
(``arena.daily_caps``): ``incr`` is atomic, so uploads at the same moment cannot pass a quota
together; the bytes are counted before the file is written and given back if it is not. Per
process while Redis is down, as the rate limits are.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from django.utils.translation import gettext

from arena.daily_caps import DailyCap, daily_caps_release, daily_caps_take, seconds_to_midnight
from arena.errors import ArenaError, ErrorCode
from arena.identity import ip_hash, session_hash
from arena.models import PromptImage

FIELD = "image"


@dataclass(frozen=True)
class Quota:
    cap: DailyCap  # the counter's name (without the day) and its limit in bytes
    setting: str
    per_session: bool


def quotas_for(*, session_key: str, ip: str | None) -> list[Quota]:
    """The quotas in force for this session and address (a quota of 0 is off)."""
    quotas = []
    per_session = settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION
    if per_session:
        name = f"arena:image-quota:session:{session_hash(session_key)}"
        cap = DailyCap(name, per_session)
        quotas.append(Quota(cap, "ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION", per_session=True))
    per_ip = settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_IP
    if per_ip and ip:
        cap = DailyCap(f"arena:image-quota:ip:{ip_hash(ip)}", per_ip)
        quotas.append(Quota(cap, "ARENA_IMAGE_UNATTACHED_BYTES_PER_IP", per_session=False))
    return quotas


def quotas_check(quotas: list[Quota], *, size: int, take: bool = False) -> list[str]:
    """Refuse with a 429 ``image_quota`` naming the quota that ``size`` more bytes would pass;
    with ``take``, count them (all or none, ``arena.daily_caps``) and return the keys counted."""
    if not quotas:
        return []
    if take:
        taken = daily_caps_take([quota.cap for quota in quotas], amount=size)
        if taken.over is not None:
            raise _over_quota(next(q for q in quotas if q.cap == taken.over))
        return taken.keys
    day = timezone.now().astimezone(UTC).date().isoformat()
    keys = [f"{quota.cap.name}:{day}" for quota in quotas]
    held = cache.get_many(keys)
    for quota, key in zip(quotas, keys, strict=True):
        if int(held.get(key, 0)) + size > quota.cap.cap:
            raise _over_quota(quota)
    return []


def _over_quota(quota: Quota) -> ArenaError:
    if quota.per_session:
        message = gettext(
            "This session has uploaded %(limit)s bytes of images not sent with a prompt today "
            "(UTC); send them with a prompt, or come back tomorrow."
        )
    else:
        message = gettext(
            "Your network has uploaded %(limit)s bytes of images not sent with a prompt today "
            "(UTC); send them with a prompt, or come back tomorrow."
        )
    return ArenaError(
        ErrorCode.IMAGE_QUOTA,
        f"{message % {'limit': quota.cap.cap}} ({quota.setting})",
        status=429,
        field=FIELD,
        retry_after=seconds_to_midnight(),
    )


def counters_give_back(keys: list[str], size: int) -> None:
    daily_caps_release(keys, amount=size)


def _held_key(image_id: uuid.UUID) -> str:
    """Where the counters an unattached image counts against are remembered."""
    return f"arena:image-quota-held:{image_id.hex}"


def quotas_hold(image_id: uuid.UUID, keys: list[str]) -> None:
    """Remember which counters a stored image counts against, until a battle takes it."""
    if keys:
        cache.set(_held_key(image_id), keys, timeout=seconds_to_midnight())


def images_quota_give_back(images: list[PromptImage]) -> None:
    """Give the bytes of images a battle took back to the quotas they count against (run after
    the battle commits: an image is taken once, so its bytes are given back once)."""
    held = cache.get_many([_held_key(image.pk) for image in images])
    for image in images:
        keys = held.get(_held_key(image.pk))
        if keys:
            counters_give_back(list(keys), image.size)
    if held:
        cache.delete_many(list(held))
