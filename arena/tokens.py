"""API tokens for the machine APIs: created with a name and scopes, shown once, stored as a hash.

A token is ``arena_`` followed by 43 URL-safe characters (32 random bytes). Only its SHA-256 is
stored, with its first characters (``prefix``) so that a person can tell tokens apart in the
admin and in ``manage.py api_token list``. Authenticating looks the hash up through its unique
index: the comparison happens on a digest of the presented token, so its time says nothing about
how much of a stored token was guessed.
"""

import hashlib
import secrets
from collections.abc import Sequence
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from arena.errors import ArenaError, ErrorCode
from arena.models import ApiToken

TOKEN_PREFIX = "arena_"  # noqa: S105 - the public marker of every token, not a secret
# The characters kept in clear: the fixed prefix and 6 random characters.
PREFIX_CHARS = len(TOKEN_PREFIX) + 6
# ``last_used_at`` is written at most this often per token (a write per request would be waste).
LAST_USED_RESOLUTION = timedelta(minutes=1)
SCOPES: frozenset[str] = frozenset(ApiToken.Scope.values)

UNAUTHORIZED_MESSAGE = "Send a valid API token: Authorization: Bearer <token>."
# The ``WWW-Authenticate`` header of every 401 the tokens' endpoints answer.
BEARER_CHALLENGE = 'Bearer realm="arena"'


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def token_create(*, name: str, scopes: Sequence[str]) -> tuple[ApiToken, str]:
    """A new token with ``scopes`` (each an ``ApiToken.Scope`` value): the row and the token
    itself, which is not stored and cannot be shown again."""
    name = name.strip()
    if not name:
        raise ArenaError(ErrorCode.INVALID, "Give the token a name.", field="name")
    if len(name) > ApiToken._meta.get_field("name").max_length:  # type: ignore[operator]
        raise ArenaError(ErrorCode.INVALID, "The name is too long.", field="name")
    if not scopes:
        raise ArenaError(ErrorCode.INVALID, "Give the token at least one scope.", field="scope")
    unknown = sorted(set(scopes) - SCOPES)
    if unknown:
        raise ArenaError(
            ErrorCode.INVALID,
            f"Unknown scope {', '.join(unknown)}; scopes are {', '.join(sorted(SCOPES))}.",
            field="scope",
        )
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        name=name,
        prefix=raw[:PREFIX_CHARS],
        key_hash=token_hash(raw),
        scopes=sorted(set(scopes)),
    )
    return token, raw


def token_authenticate(raw: str) -> ApiToken:
    """The live token ``raw`` is, or a 401 (unknown, malformed or revoked: the same answer but
    for the revoked one, whose holder learns to ask for a new token). Records the use."""
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        raise ArenaError(ErrorCode.UNAUTHORIZED, UNAUTHORIZED_MESSAGE, status=401)
    token = ApiToken.objects.filter(key_hash=token_hash(raw)).first()
    if token is None:
        raise ArenaError(ErrorCode.UNAUTHORIZED, UNAUTHORIZED_MESSAGE, status=401)
    if token.revoked_at is not None:
        raise ArenaError(ErrorCode.UNAUTHORIZED, "This API token has been revoked.", status=401)
    _token_touch(token)
    return token


def _token_touch(token: ApiToken) -> None:
    """Set ``last_used_at`` to now unless it was set less than a minute ago (one conditional
    UPDATE, so concurrent requests write it once)."""
    now = timezone.now()
    stale = now - LAST_USED_RESOLUTION
    if token.last_used_at is not None and token.last_used_at > stale:
        return
    updated = (
        ApiToken.objects.filter(pk=token.pk)
        .filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale))
        .update(last_used_at=now)
    )
    if updated:
        token.last_used_at = now


def token_require_scope(*, token: ApiToken, scope: str) -> None:
    """A 403 unless ``token`` carries ``scope``."""
    name = str(scope)  # an ApiToken.Scope member is named by its value ('env', not Scope.ENV)
    if name not in token.scopes:
        raise ArenaError(
            ErrorCode.FORBIDDEN, f"This API token does not have the {name!r} scope.", status=403
        )


def token_for_request(*, authorization: str, scope: str) -> ApiToken:
    """The live token an ``Authorization: Bearer <token>`` header sends, if it carries
    ``scope``: a 401 for a missing, malformed, unknown or revoked token, a 403 without the
    scope. The one check of every endpoint a token opens (the environment API, the export)."""
    scheme, _, raw = authorization.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise ArenaError(ErrorCode.UNAUTHORIZED, UNAUTHORIZED_MESSAGE, status=401)
    token = token_authenticate(raw.strip())
    token_require_scope(token=token, scope=scope)
    return token


def token_find(*, prefix_or_id: str) -> ApiToken:
    """The one token with this id or whose prefix (or whole token) starts with this text."""
    text = prefix_or_id.strip()
    if text.isdigit():
        found = ApiToken.objects.filter(pk=int(text)).first()
        if found is not None:
            return found
    if text.startswith(TOKEN_PREFIX) and len(text) > PREFIX_CHARS:  # the whole token
        found = ApiToken.objects.filter(key_hash=token_hash(text)).first()
        if found is not None:
            return found
    matches = list(ApiToken.objects.filter(prefix__startswith=text[:PREFIX_CHARS])[:2])
    if not text or not matches:
        raise ArenaError(ErrorCode.NOT_FOUND, f"No API token {text!r}.", status=404)
    if len(matches) > 1:
        raise ArenaError(
            ErrorCode.INVALID, f"{text!r} names more than one token; give its id.", field="token"
        )
    return matches[0]


def token_revoke(*, token: ApiToken) -> bool:
    """Revoke ``token`` from now on; False when it already was (the first time is kept)."""
    updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token.refresh_from_db(fields=["revoked_at"])
    return bool(updated)
