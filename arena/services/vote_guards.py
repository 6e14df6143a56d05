"""What a visitor passes before a vote is recorded: a proof-of-work challenge once per session,
and daily caps per session and per client address (``arena.daily_caps``, which red-team
attempts count through too).

Both are kept in the cache (Redis in production, shared by every worker). While Redis is down
the cache's counters (``add``/``incr``) are counted per process (``arena.cache``), as the rate
limits are: the caps and the replay guard keep holding, each worker counting alone, rather than
failing closed (no vote at all while Redis restarts) or open (no cap at all). The verified mark
lives in the session (``cached_db`` in production, so it survives Redis too).

The challenge is ALTCHA's (version 1 of its protocol, the ``altcha`` package): the server signs
``challenge = sha256(salt + number)`` for a secret ``number`` at most ``maxnumber``, with an
expiry in the salt; the browser finds the number (``static/js/challenge.js``) and sends the
base64 JSON payload back. A solved challenge counts once: its hash is remembered until it
expires.
"""

import base64
import binascii
import hashlib
import hmac
import json
from datetime import timedelta
from typing import Literal

import altcha.v1 as altcha
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from django.utils.translation import gettext

# The API's response schema: pydantic needs typing_extensions' TypedDict on Python 3.11.
from typing_extensions import TypedDict

from arena.daily_caps import DailyCap, daily_caps_release, daily_caps_take
from arena.errors import ArenaError, ErrorCode
from arena.identity import ip_hash, session_hash

# The session's mark that it solved a challenge (its value: the challenge's expiry is not kept;
# a session, once verified, stays so for its lifetime).
CHALLENGE_SESSION_KEY = "arena_challenge_verified"
_ALGORITHM: Literal["SHA-256"] = "SHA-256"


class ChallengePayload(TypedDict):
    """What ``GET /api/challenge`` returns: ALTCHA's challenge JSON."""

    algorithm: str
    challenge: str
    maxnumber: int
    salt: str
    signature: str


def _hmac_key() -> str:
    """``ARENA_CHALLENGE_HMAC_KEY``, else a key derived from ``SECRET_KEY`` for this purpose."""
    configured = settings.ARENA_CHALLENGE_HMAC_KEY
    if configured:
        return str(configured)
    return hmac.new(settings.SECRET_KEY.encode(), b"arena.challenge", hashlib.sha256).hexdigest()


def challenge_create() -> ChallengePayload:
    """A new signed challenge, valid for ``ARENA_CHALLENGE_EXPIRES_SECONDS``."""
    expires = timezone.now() + timedelta(seconds=settings.ARENA_CHALLENGE_EXPIRES_SECONDS)
    made = altcha.create_challenge(
        algorithm=_ALGORITHM,
        max_number=settings.ARENA_CHALLENGE_MAX_NUMBER,
        salt_length=12,
        hmac_key=_hmac_key(),
        salt="",
        number=None,
        expires=expires,
        params=None,
    )
    return {
        "algorithm": made.algorithm,
        "challenge": made.challenge,
        "maxnumber": made.max_number,
        "salt": made.salt,
        "signature": made.signature,
    }


def _refused(message: str) -> ArenaError:
    return ArenaError(ErrorCode.CHALLENGE_FAILED, message, status=400, field="payload")


def challenge_verify(*, payload: object) -> None:
    """Accept a solved challenge once, or raise ``challenge_failed`` naming ``payload``.

    ``payload`` is ALTCHA's: base64 of the JSON ``{algorithm, challenge, number, salt,
    signature}``. Refused: not that shape, a wrong number or signature, an expired challenge, a
    challenge without an expiry (none of the server's) and one already used.
    """
    if not isinstance(payload, str) or not payload:
        raise _refused(gettext("payload must be the solved challenge (base64 JSON), as a string."))
    try:
        fields = json.loads(base64.b64decode(payload, validate=True))
    except (binascii.Error, ValueError):
        raise _refused(gettext("payload is not base64 JSON.")) from None
    if not isinstance(fields, dict) or not all(
        isinstance(fields.get(name), str)
        for name in ("algorithm", "challenge", "salt", "signature")
    ):
        raise _refused(gettext("payload is not a solved challenge."))
    number = fields.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise _refused(gettext("payload's number must be a non-negative integer."))
    if fields["algorithm"] != _ALGORITHM:
        raise _refused(
            gettext("payload's algorithm must be %(algorithm)s.") % {"algorithm": _ALGORITHM}
        )
    solved = altcha.Payload(
        algorithm=_ALGORITHM,
        challenge=fields["challenge"],
        number=number,
        salt=fields["salt"],
        signature=fields["signature"],
    )
    ok, problem = altcha.verify_solution(solved, _hmac_key(), check_expires=True)
    if not ok:
        expired = problem is not None and "expired" in problem
        raise _refused(
            gettext("The challenge has expired; fetch a new one.")
            if expired
            else gettext("The challenge is not solved (wrong number or signature).")
        )
    _, expires_at, _ = solved.parse_salt()
    if expires_at is None:
        raise _refused(gettext("The challenge has no expiry, so it is none of this server's."))
    # Remembered until it expires (after that, verify_solution refuses it by itself).
    seconds_left = max(1, int(expires_at - timezone.now().timestamp()) + 1)
    if not cache.add(f"arena:challenge-used:{solved.challenge}", 1, timeout=seconds_left):
        raise _refused(gettext("This challenge has been used already; fetch a new one."))


def challenge_required_error() -> ArenaError:
    return ArenaError(
        ErrorCode.CHALLENGE_REQUIRED,
        gettext(
            "Solve the challenge first (GET /api/challenge, then POST the solution to "
            "/api/challenge/verify); the battle page does this by itself."
        ),
        status=403,
    )


# --- daily caps -------------------------------------------------------------------------------
def _session_cap(session_key: str) -> DailyCap:
    return DailyCap(
        f"arena:vote-cap:session:{session_hash(session_key)}",
        settings.ARENA_VOTES_PER_SESSION_PER_DAY,
    )


def vote_caps_take(*, session_key: str, ip: str | None) -> list[str]:
    """Count one vote against today's caps per session and per client address
    (``arena.daily_caps``), or raise a 429 ``vote_cap`` naming the cap (and count nothing).
    Returns the keys counted, for ``vote_caps_release`` if the vote then fails."""
    caps = [_session_cap(session_key)] if session_key else []
    if ip:
        caps.append(
            DailyCap(f"arena:vote-cap:ip:{ip_hash(ip)}", settings.ARENA_VOTES_PER_IP_PER_DAY)
        )
    taken = daily_caps_take(caps)
    if taken.over is None:
        return taken.keys
    cap = taken.over.cap
    if session_key and taken.over == _session_cap(session_key):
        message = gettext(
            "This session has cast its %(cap)s votes for today (UTC); come back tomorrow."
        ) % {"cap": cap}
        setting = "ARENA_VOTES_PER_SESSION_PER_DAY"
    else:
        message = gettext(
            "Your network has cast its %(cap)s votes for today (UTC); come back tomorrow."
        ) % {"cap": cap}
        setting = "ARENA_VOTES_PER_IP_PER_DAY"
    raise ArenaError(ErrorCode.VOTE_CAP, f"{message} ({setting})", status=429)


vote_caps_release = daily_caps_release
