"""The JSON API's plumbing that django-ninja does not do: the one place domain errors become
responses (``error_json``, and ``ApiErrorMiddleware`` for the errors no operation answered), the
visitor's session identity, and the URL inputs no text may carry. The operations are
``arena.visitor_api``'s; ``config.api`` mounts them."""

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.utils.crypto import constant_time_compare
from django.utils.translation import gettext, gettext_lazy
from django_ratelimit.core import is_ratelimited
from django_stubs_ext import StrPromise

from arena.errors import SERVER_ERROR_MESSAGE, ArenaError, ErrorCode, not_found
from arena.identity import voter_id_new
from arena.inputs import text_problem

VOTER_SESSION_KEY = "arena_voter_id"
API_PREFIX = "/api/"
# The per-address limit of votes (ARENA_RATELIMIT_VOTES), over HTTP and the battle socket alike.
VOTE_RATE_GROUP = "arena.vote_create"
VOTE_RATE_SETTING = "ARENA_RATELIMIT_VOTES"

# The code and message of an error that no view phrased itself (a 404 for an unknown path, a
# 405 from a method decorator, a 400 from a request Django refused, an unexpected exception).
# Lazy, so each is worded in the language of the request it answers.
_STATUS_ERRORS: dict[int, tuple[ErrorCode, str | StrPromise]] = {
    400: (ErrorCode.BAD_REQUEST, gettext_lazy("The request could not be understood.")),
    403: (ErrorCode.FORBIDDEN, gettext_lazy("You are not allowed to do that.")),
    404: (ErrorCode.NOT_FOUND, gettext_lazy("Not found.")),
    405: (ErrorCode.METHOD_NOT_ALLOWED, gettext_lazy("This method is not allowed here.")),
    500: (ErrorCode.SERVER_ERROR, gettext_lazy(SERVER_ERROR_MESSAGE)),
}


# Form encodings: the API takes JSON only. Django parses a multipart body before the view runs
# (the CSRF check reads ``request.POST``), after which the raw body cannot be read any more, so a
# form is refused by its content type.
FORM_CONTENT_TYPES = ("multipart/", "application/x-www-form-urlencoded")


def not_json(content_type: str) -> ArenaError:
    """The error for a body that is a form (or any other stream Django parsed), not JSON."""
    return ArenaError(
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        gettext("The request body must be JSON (Content-Type: application/json), not %(type)s.")
        % {"type": content_type},
        status=415,
        field="body",
    )


# The API's views that take a form (multipart/form-data) rather than JSON, by view name.
FORM_VIEWS = frozenset({"api:image_create"})


def form_unreadable() -> ArenaError:
    """The error for a form Django cannot parse sent to a view that takes one: a multipart
    body whose Content-Type names no usable boundary, or whose parts are cut short."""
    return ArenaError(
        ErrorCode.BAD_REQUEST,
        gettext(
            "The form in the request body cannot be read: a multipart/form-data body needs a "
            "boundary in its Content-Type and every part whole."
        ),
        status=400,
        field="body",
    )


def text_inputs_problem(request: HttpRequest, url_args: dict[str, Any]) -> ArenaError | None:
    """A 400 for a NUL or a lone surrogate in a URL argument or a query parameter, naming it.

    Nothing the API takes from the URL may hold either: PostgreSQL cannot store a NUL in text
    and a lone surrogate cannot be encoded. (Percent-encoded invalid UTF-8 in a query arrives
    as U+FFFD, a NUL as itself.)
    """
    inputs = [(name, value) for name, value in url_args.items() if isinstance(value, str)]
    for name, values in request.GET.lists():
        inputs += [(name if text_problem(name) is None else "query", v) for v in (name, *values)]
    for name, value in inputs:
        problem = text_problem(value)
        if problem is not None:
            return ArenaError(ErrorCode.INVALID, f"{name} {problem}.", field=name)
    return None


def session_identity(request: HttpRequest) -> tuple[str, str]:
    """The session key and pseudonymous voter id of this visitor, creating both if needed."""
    return session_store_identity(request.session)


def session_store_identity(session: SessionBase) -> tuple[str, str]:
    """``session_identity`` of a session store (a request's, or one a socket loads by key)."""
    voter_id = session.get(VOTER_SESSION_KEY)
    if not voter_id:
        voter_id = voter_id_new()
        session[VOTER_SESSION_KEY] = voter_id
    if session.session_key is None or session.modified:
        session.save()
    assert session.session_key is not None
    return session.session_key, voter_id


def request_account_id(request: HttpRequest) -> int | None:
    """The account the request's visitor is signed in to (``request.user``), or None: voting
    needs none, and an anonymous visitor's session costs no query here."""
    user = request.user
    return int(user.pk) if user.is_authenticated else None


def session_account_id(session: SessionBase) -> int | None:
    """``request_account_id`` of a session store (one a socket loads by key): the account
    ``django.contrib.auth.get_user`` would find in it (signed in through a backend still
    configured, the account active, the session's auth hash the account's current one or a
    fallback's), or None. Unlike ``get_user`` it leaves the session as it is: a hash that no
    longer matches (the password changed) is no account here, not a flushed session."""
    raw_id = session.get(SESSION_KEY)
    backend_path = session.get(BACKEND_SESSION_KEY)
    if raw_id is None or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(get_user_model()._meta.pk.to_python(raw_id))
    if user is None:
        return None
    stored = session.get(HASH_SESSION_KEY) or ""
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    if not stored or not any(constant_time_compare(stored, h) for h in hashes):
        return None
    return int(user.pk)


def address_rate_limited(*, group: str, setting: str, ip: str | None) -> bool:
    """Whether one more call from ``ip`` is over the per-address limit of ``setting``, counted
    (django-ratelimit's ``key="ip"``, ``increment``) in ``group`` with the HTTP operations
    limited so (``arena.visitor_api.limited``): the websocket's vote shares the HTTP vote's
    count. ``key="ip"`` reads ``REMOTE_ADDR`` (no ``RATELIMIT_IP_META_KEY`` is set), which a
    minimal request carries; no address (the server reports no peer) is not limited, as the
    live calls' limit (``arena.live.limits``)."""
    if not ip:
        return False
    request = HttpRequest()
    request.method = "POST"
    request.META["REMOTE_ADDR"] = ip
    return bool(
        is_ratelimited(
            request,
            group=group,
            key="ip",
            rate=lambda group, request: getattr(settings, setting),
            increment=True,
        )
    )


def client_ip(request: HttpRequest) -> str | None:
    """``REMOTE_ADDR`` as the ASGI server set it; no forwarded header is read here.

    That is the connection's peer, unless ``bin/serve`` runs uvicorn with
    ``ARENA_FORWARDED_ALLOW_IPS``: then a request from one of those proxies carries the address
    its ``X-Forwarded-For`` names. None when the server reports no peer.
    """
    return request.META.get("REMOTE_ADDR")


def is_api_request(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


# Downloads outside /api/ (the leaderboard's /leaderboard.csv and /leaderboard.json): no page.
DOWNLOAD_SUFFIXES = (".csv", ".json")


def errors_as_json(request: HttpRequest) -> bool:
    """Whether an error answering this request takes the API's JSON shape (``path_errors_as_json``)."""
    return path_errors_as_json(request.path_info)


def path_errors_as_json(path: str) -> bool:
    """Whether an error answering a request for ``path`` takes the API's JSON shape: under /api/
    and on a download, whose callers are programs; a page's error is a page. Also read by the
    HTTP protocol (config/protocols.py) for the requests uvicorn refuses before Django sees
    them."""
    return path.startswith(API_PREFIX) or path.endswith(DOWNLOAD_SUFFIXES)


def error_json(error: ArenaError) -> JsonResponse:
    """The one HTTP response of an ``ArenaError``: its body (``as_dict``) with its status, and
    ``Retry-After`` when the error says when to come back."""
    response = JsonResponse(error.as_dict(), status=error.status)
    if error.retry_after is not None:
        response["Retry-After"] = str(error.retry_after)
    return response


def error_response(
    status: int, *, code: ErrorCode | None = None, message: str | None = None
) -> JsonResponse:
    """The API's error shape for ``status``, with the default code and message unless given."""
    default_code, default_message = _STATUS_ERRORS.get(
        status, (ErrorCode.ERROR, f"{HTTPStatus(status).phrase}.")
    )
    return error_json(ArenaError(code or default_code, message or default_message, status=status))


def no_store(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """``Cache-Control: no-store`` on every answer under /api/: each one belongs to one visitor
    (their battle, their vote, their terms, a staff member's export) or is an error about their
    request, so neither a shared cache nor the browser's may keep it."""
    if is_api_request(request):
        response["Cache-Control"] = "no-store"
    return response


class ApiErrorMiddleware:
    """Give every error response under /api/ and on a download (``errors_as_json``) the JSON
    error shape, and every response under /api/ ``Cache-Control: no-store``.

    The API's operations already answer in it; this catches the rest: a 405 for a method an
    operation does not take, a 404 for an unknown path, a 400 for a request Django refused, and with
    DEBUG on, the debug pages (the exception itself is still logged by Django).
    """

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], HttpResponseBase]
        | Callable[[HttpRequest], Awaitable[HttpResponseBase]],
    ) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self.__acall__(request)
        response = self.get_response(request)
        assert isinstance(response, HttpResponseBase)  # a sync chain answers at once
        return no_store(request, self.shape(request, response))

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        pending = self.get_response(request)
        assert not isinstance(pending, HttpResponseBase)  # an async chain answers an awaitable
        return no_store(request, self.shape(request, await pending))

    @staticmethod
    def shape(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if (
            response.status_code < 400
            or not errors_as_json(request)
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        message = None
        if response.status_code == 405:
            message = gettext("%(method)s is not allowed here; allowed: %(allow)s.") % {
                "method": request.method,
                "allow": response.get("Allow", ""),
            }
        shaped = error_response(response.status_code, message=message)
        for header in ("Allow", "Retry-After"):
            if header in response:
                shaped[header] = response[header]
        shaped.cookies = response.cookies
        return shaped


# --- the django-ninja APIs' shared error handlers (the visitor API's and the environment's) ----


def ninja_http_error(request: HttpRequest, exc: object) -> JsonResponse:
    """ninja's ``HttpError`` (a body that does not parse, mostly) in the arena's error shape; the
    body parser raises it from the ``ArenaError`` that names the field."""
    from ninja.errors import HttpError

    assert isinstance(exc, HttpError)
    if isinstance(exc.__cause__, ArenaError):
        return error_json(exc.__cause__)
    code = ErrorCode.BAD_REQUEST if exc.status_code == 400 else ErrorCode.ERROR
    return error_json(ArenaError(code, exc.message, status=exc.status_code))


def ninja_not_found(request: HttpRequest, exc: object) -> JsonResponse:
    return error_json(not_found("Resource"))
