"""The moderation hook: a visitor's live prompt is checked before any model is called.

With ``ARENA_MODERATION_PROVIDER`` naming a Provider, the prompt goes to that provider's
OpenAI moderation endpoint (``client.moderations.create``, model ``ARENA_MODERATION_MODEL``);
otherwise the local blocklist (``ARENA_MODERATION_BLOCKLIST``: a file, one word or phrase a
line, ``#`` comments, or a comma-separated list) is matched, case-insensitively and as whole
words. A refused prompt is recorded (``RefusedPrompt``, its hash, never its text) and answered
with ``prompt_refused``; the caller counts it against the live-call rate limit first.

Images sent with a prompt (data URLs) go to the moderation endpoint with its text, as
``image_url`` input parts (OpenAI's omni moderation model takes them). Without a moderation
provider, ``ARENA_IMAGE_POLICY`` decides: ``allow`` lets them through, ``refuse`` refuses every
prompt with images (``prompt_refused`` naming the field images, recorded).

The endpoint failing (a timeout, a 5xx, a refused key) fails closed: the prompt is not sent to
any model and the visitor gets ``moderation_unavailable`` (503) to try again. The point of the
hook is that no model sees an unchecked prompt, and what a failure costs is a live battle now,
while pool battles and votes go on.
"""

import hashlib
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils.translation import gettext_lazy

from arena.errors import ArenaError, ErrorCode
from arena.identity import ip_hash, session_hash
from arena.models import Provider, RefusedPrompt

log = logging.getLogger(__name__)

REFUSED_MESSAGE = gettext_lazy(
    "This prompt was refused by the arena's content rules, so no model was asked. "
    "Try a different prompt."
)
UNAVAILABLE_MESSAGE = gettext_lazy(
    "Prompts cannot be checked right now, so none is sent; try again in a moment."
)


@dataclass(frozen=True)
class Verdict:
    refused: bool
    checker: str  # a RefusedPrompt.Checker value
    reason: str = ""


IMAGES_REFUSED_MESSAGE = gettext_lazy(
    "Images are not accepted in prompts here, so no model was asked. Send the prompt without them."
)


def prompt_moderate(
    *,
    text: str,
    session_key: str,
    client_ip: str | None,
    image_urls: Sequence[str] = (),
) -> None:
    """Refuse ``text`` with its images (data URLs) (``prompt_refused``, recorded) or let it
    through; fails closed."""
    verdict = prompt_verdict(text, image_urls)
    if not verdict.refused:
        return
    RefusedPrompt.objects.create(
        session_hash=session_hash(session_key),
        ip_hash=ip_hash(client_ip),
        prompt_sha256=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        prompt_chars=len(text),
        checker=verdict.checker,
        reason=verdict.reason[:300],
    )
    if verdict.checker == RefusedPrompt.Checker.IMAGE_POLICY:
        raise ArenaError(ErrorCode.PROMPT_REFUSED, IMAGES_REFUSED_MESSAGE, field="images")
    raise ArenaError(ErrorCode.PROMPT_REFUSED, REFUSED_MESSAGE, field="prompt")


def prompt_verdict(text: str, image_urls: Sequence[str] = ()) -> Verdict:
    provider_name = settings.ARENA_MODERATION_PROVIDER
    if provider_name:
        return _openai_verdict(text, provider_name, image_urls)
    if image_urls and settings.ARENA_IMAGE_POLICY == "refuse":
        return Verdict(
            refused=True, checker=RefusedPrompt.Checker.IMAGE_POLICY, reason="images refused"
        )
    entry = _blocklist_match(text, settings.ARENA_MODERATION_BLOCKLIST)
    return Verdict(
        refused=entry is not None, checker=RefusedPrompt.Checker.BLOCKLIST, reason=entry or ""
    )


def _unavailable() -> ArenaError:
    return ArenaError(ErrorCode.MODERATION_UNAVAILABLE, UNAVAILABLE_MESSAGE, status=503)


def _moderation_input(text: str, image_urls: Sequence[str]) -> str | list[dict[str, Any]]:
    """The endpoint's input: the text alone, or its parts with the images (multi-modal)."""
    if not image_urls:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    return parts


def _openai_verdict(text: str, provider_name: str, image_urls: Sequence[str] = ()) -> Verdict:
    # Here, not at module level: only a site that names a moderation provider loads the client.
    import openai

    provider = Provider.objects.filter(name=provider_name).first()
    if provider is None:
        log.error("ARENA_MODERATION_PROVIDER names no provider: %r", provider_name)
        raise _unavailable()
    client = openai.OpenAI(
        base_url=provider.base_url,
        api_key=(os.environ.get(provider.api_key_env) if provider.api_key_env else None) or "none",
        timeout=settings.ARENA_MODERATION_TIMEOUT_SECONDS,
        max_retries=0,
    )
    try:
        with client:
            answer = client.moderations.create(
                model=settings.ARENA_MODERATION_MODEL,
                input=_moderation_input(text, image_urls),  # type: ignore[arg-type]
            )
    except openai.OpenAIError as exc:
        log.warning("Moderation endpoint of %s failed: %s", provider_name, type(exc).__name__)
        raise _unavailable() from None
    flagged = [result for result in answer.results if result.flagged]
    if not flagged:
        return Verdict(refused=False, checker=RefusedPrompt.Checker.OPENAI)
    categories = sorted(
        {
            name
            for result in flagged
            for name, hit in result.categories.model_dump(by_alias=True).items()
            if hit
        }
    )
    return Verdict(refused=True, checker=RefusedPrompt.Checker.OPENAI, reason=", ".join(categories))


def _blocklist_match(text: str, configured: str) -> str | None:
    """The first blocklist entry found in ``text`` as whole words, or None."""
    if not configured.strip():
        return None
    pattern = _blocklist_pattern(configured, _mtime(configured))
    if pattern is None:
        return None
    found = pattern.search(text)
    return None if found is None else found.group(0).lower()


def _mtime(configured: str) -> float:
    """The file's modification time (so an edited list is read again), 0 for a plain list."""
    try:
        return Path(configured).stat().st_mtime
    except (OSError, ValueError):
        return 0.0


@lru_cache(maxsize=4)
def _blocklist_pattern(configured: str, mtime: float) -> re.Pattern[str] | None:
    path = Path(configured)
    if mtime and path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        entries = [line.split("#", 1)[0].strip() for line in lines]
    else:
        entries = [entry.strip() for entry in configured.split(",")]
    entries = [entry for entry in entries if entry]
    if not entries:
        return None
    # Longest first, so that a phrase wins over a word it starts with; spaces match any run of
    # whitespace; (?<!\w)/(?!\w) make whole-word matches that also work for entries ending in
    # punctuation.
    alternatives = [
        r"\s+".join(re.escape(word) for word in entry.split())
        for entry in sorted(entries, key=len, reverse=True)
    ]
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)
