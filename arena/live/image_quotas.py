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

from arena.cache import counters_take
from arena.daily_caps import seconds_to_midnight
from arena.errors import ArenaError, ErrorCode
from arena.identity import ip_hash, session_hash
from arena.models import PromptImage

FIELD = "image"


@dataclass(frozen=True)
class Quota:
    key: str
    limit: int
    setting: str
    per_session: bool


def quotas_for(*, session_key: str, ip: str | None) -> list[Quota]:
    """Today's (UTC) quotas in force for this session and address."""
    day = timezone.now().astimezone(UTC).date().isoformat()
    quotas = []
    per_session = settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION
    if per_session:
        key = f"arena:image-quota:session:{session_hash(session_key)}:{day}"
        setting = "ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION"
        quotas.append(Quota(key, per_session, setting, per_session=True))
    per_ip = settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_IP
    if per_ip and ip:
        key = f"arena:image-quota:ip:{ip_hash(ip)}:{day}"
        setting = "ARENA_IMAGE_UNATTACHED_BYTES_PER_IP"
        quotas.append(Quota(key, per_ip, setting, per_session=False))
    return quotas


def quotas_check(quotas: list[Quota], *, size: int, take: bool = False) -> list[str]:
    """Refuse with a 429 ``image_quota`` naming the quota that ``size`` more bytes would pass;
    with ``take``, count them (all or none) and return the keys counted."""
    if not quotas:
        return []
    keys = [quota.key for quota in quotas]
    if take:
        counts = counters_take(keys, timeout=seconds_to_midnight(), amount=size)
    else:
        held = cache.get_many(keys)
        counts = [int(held.get(key, 0)) + size for key in keys]
    for quota, count in zip(quotas, counts, strict=True):
        if count > quota.limit:
            if take:
                counters_give_back(keys, size)
            raise _over_quota(quota)
    return keys


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
        f"{message % {'limit': quota.limit}} ({quota.setting})",
        status=429,
        field=FIELD,
        retry_after=seconds_to_midnight(),
    )


def counters_give_back(keys: list[str], size: int) -> None:
    for key in keys:
        try:
            cache.decr(key, size)
        except ValueError:  # expired meanwhile (a new day): nothing to give back
            pass


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
