"""The arena's error vocabulary: the one domain error the services raise, its codes, and the
two shapes it takes on the wire.

Following Zulip's ``JsonableError``: every code a client may see is an ``ErrorCode`` member (a
``StrEnum``, so the JSON carries the same strings as ever: the codes are part of the API), a
message used in more than one place is written once here, and ``ArenaError.as_dict`` (an HTTP
body) and ``ArenaError.as_frame`` (a websocket frame) are the only builders of error bodies.
"""

from enum import StrEnum, unique

from django.utils.translation import gettext, gettext_lazy, gettext_noop
from django_stubs_ext import StrPromise

from arena.payloads import ErrorBody, ErrorDetail, ErrorFrame


@unique
class ErrorCode(StrEnum):
    # the request itself
    BAD_REQUEST = "bad_request"
    INVALID = "invalid"
    INVALID_JSON = "invalid_json"
    INVALID_FRAME = "invalid_frame"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    REQUEST_TOO_LARGE = "request_too_large"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    CSRF_FAILED = "csrf_failed"
    RATE_LIMITED = "rate_limited"
    TOO_MANY_SOCKETS = "too_many_sockets"
    # battles and votes
    NO_SESSION = "no_session"
    TERMS_REQUIRED = "terms_required"
    NO_BATTLE_AVAILABLE = "no_battle_available"
    NOT_VOTABLE = "not_votable"
    ALREADY_VOTED = "already_voted"
    VOTE_CAP = "vote_cap"
    CHALLENGE_REQUIRED = "challenge_required"
    CHALLENGE_FAILED = "challenge_failed"
    # live battles
    EMPTY_PROMPT = "empty_prompt"
    PROMPT_TOO_LONG = "prompt_too_long"
    NO_LIVE_MODELS = "no_live_models"
    TOO_MANY_BATTLES = "too_many_battles"
    STILL_STREAMING = "still_streaming"
    NOT_CONTINUABLE = "not_continuable"
    TURN_LIMIT = "turn_limit"
    NOT_SAVED_YET = "not_saved_yet"
    TURN_LOST = "turn_lost"
    PROMPT_REFUSED = "prompt_refused"
    MODERATION_UNAVAILABLE = "moderation_unavailable"
    IMAGE_QUOTA = "image_quota"
    # red-teaming attempts (the redteam app)
    ATTEMPT_CAP = "attempt_cap"
    JUDGE_UNAVAILABLE = "judge_unavailable"
    # models, pools and demo data (management commands and the admin)
    EXISTS = "exists"
    INVALID_FILE = "invalid_file"
    INVALID_LINE = "invalid_line"
    UNREADABLE = "unreadable"
    EMPTY = "empty"
    MISSING_DATA = "missing_data"
    # the environment API (the environment app)
    UNAUTHORIZED = "unauthorized"
    RUN_CLOSED = "run_closed"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    TOO_MANY_PENDING = "too_many_pending"
    TOO_MANY_RUNS = "too_many_runs"
    REWARD_MODEL_UNAVAILABLE = "reward_model_unavailable"
    # the server
    SERVER_ERROR = "server_error"
    ERROR = "error"  # an HTTP error status no other code names


# Messages said in more than one place.
STILL_STREAMING_MESSAGE = gettext_lazy("Wait for both answers (or stop them) first.")
# Plain text, marked for the catalogue: arena.api's table of default messages holds it as a str.
SERVER_ERROR_MESSAGE = gettext_noop("Something went wrong on our side; the error has been logged.")
ALREADY_VOTED_MESSAGE = gettext_lazy("This battle already has a vote.")


class ArenaError(Exception):
    """A failure a client can act on.

    ``code`` is an ``ErrorCode`` (anything else is a programming error, refused at once),
    ``status`` the HTTP status it maps to, ``field`` names the offending input field when
    there is one, and ``retry_after`` (seconds) is sent as ``Retry-After`` with an HTTP answer.
    ``message`` is text, or a lazy translation read in the language active when it is used.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str | StrPromise,
        *,
        status: int = 400,
        field: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        if not isinstance(code, ErrorCode):
            raise TypeError(f"ArenaError codes are ErrorCode members, not {code!r}")
        super().__init__(message)
        self.code = code
        self._message = message
        self.status = status
        self.field = field
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        """The message as text, in the active language when it was given lazily."""
        return str(self._message)

    def __str__(self) -> str:
        return self.message

    def as_dict(self) -> ErrorBody:
        """The HTTP body: ``{"error": {code, message, field?}}``."""
        body: ErrorDetail = {"code": self.code.value, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return {"error": body}

    def as_frame(self) -> ErrorFrame:
        """The websocket frame: ``{"type": "error", code, message, field}``."""
        return {
            "type": "error",
            "code": self.code.value,
            "message": self.message,
            "field": self.field,
        }


def not_found(what: str) -> ArenaError:
    """``what`` (such as ``gettext("Battle")``) was not found; "%(what)s not found." is the
    translated sentence around it."""
    return ArenaError(
        ErrorCode.NOT_FOUND, gettext("%(what)s not found.") % {"what": what}, status=404
    )


def still_streaming(status: int = 409) -> ArenaError:
    return ArenaError(ErrorCode.STILL_STREAMING, STILL_STREAMING_MESSAGE, status=status)


def rate_limited() -> ArenaError:
    """Over a per-address rate limit (django-ratelimit's), over HTTP or a socket alike."""
    return ArenaError(ErrorCode.RATE_LIMITED, gettext("Too many requests; slow down."), status=429)


def server_error() -> ArenaError:
    """The generic answer to an unexpected exception (which is logged, never shown)."""
    return ArenaError(ErrorCode.SERVER_ERROR, gettext(SERVER_ERROR_MESSAGE), status=500)
