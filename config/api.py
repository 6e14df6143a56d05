"""The visitor API and the leaderboard downloads as one django-ninja API, and its generated
OpenAPI document at ``/api/openapi.json``.

The operations live with their apps (``arena.visitor_api`` under ``/api/``, ``ratings.api``
for ``/leaderboard.json`` and ``/leaderboard.csv``); they meet here because the arena never
imports ratings. Every error leaves as the arena's error body (``ArenaError.as_dict``). The
environment API (``environment.api``) is a separate API with its own document.

Unlike the environment API, this one is a cookie session's: its POSTs pass Django's CSRF check
in ``CsrfViewMiddleware`` before any operation runs, as every other view of the site does
(ninja marks its views exempt; ``csrf_checked`` lifts the mark).
"""

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser

from arena.api import error_json, ninja_http_error, ninja_not_found
from arena.errors import ArenaError, ErrorCode
from arena.inputs import json_parse
from arena.visitor_api import router as visitor_router
from ratings.api import router as ratings_router
from redteam.api import router as redteam_router


class _JsonParser(Parser):
    """JSON bodies through the arena's parser: a nesting limit, no NUL or lone surrogate in
    any string, a 400 naming the body (or the string's dotted path)."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        data = json_parse(request.body, what="The request body", field="body")
        if not isinstance(data, dict):
            raise ArenaError(
                ErrorCode.INVALID_JSON, "The request body must be a JSON object.", field="body"
            )
        return data


api = NinjaAPI(
    title="Arena API",
    version="0.1.0",
    description=(
        "Battles, votes, the terms, vote exports and the leaderboard downloads; generated from "
        "the operations. Every error under /api/ is JSON in the ErrorOut shape; `field` names "
        "the input at fault when there is one. Request bodies are JSON objects (a form body is "
        "a 415); no text input may hold a NUL or a lone surrogate (a 400 naming it). POSTs pass "
        "Django's CSRF check: the `csrftoken` cookie (set by GET /) echoed in the X-CSRFToken "
        "header (a 403 csrf_failed otherwise). A visitor is a session (the `sessionid` cookie, "
        "created on first use); battles are visible only to the session they were served to."
    ),
    urls_namespace="api",
    openapi_url="/api/openapi.json",
    docs_url=None,  # the interactive page loads its script from a CDN, which the arena never does
    servers=[{"url": "/", "description": "This arena"}],
    parser=_JsonParser(),
    openapi_extra={
        "components": {
            "securitySchemes": {
                "csrfCookie": {"type": "apiKey", "in": "cookie", "name": "csrftoken"},
                "csrfHeader": {"type": "apiKey", "in": "header", "name": "X-CSRFToken"},
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "sessionid",
                    "description": "A staff session (sign in at the admin).",
                },
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API token (`manage.py api_token create --scope export`).",
                },
            }
        }
    },
)
api.add_router("/api/", visitor_router)
api.add_router("/", ratings_router)
api.add_router("/api/", redteam_router)


# --- errors: each one in the arena's error body ------------------------------------------------


def _arena_error(request: HttpRequest, exc: object) -> HttpResponse:
    assert isinstance(exc, ArenaError)
    return error_json(exc)


def _validation_error(request: HttpRequest, exc: object) -> HttpResponse:
    """The first failing field, by its name (a query or path parameter, a body key)."""
    assert isinstance(exc, NinjaValidationError)
    first = exc.errors[0] if exc.errors else {}
    loc = [str(part) for part in first.get("loc", ())]
    if loc[:2] == ["body", "payload"]:
        loc = loc[2:]
    elif loc[:1] in (["body"], ["query"], ["path"]):
        loc = loc[1:]
    field = ".".join(loc) or "body"
    message = str(first.get("msg", "Invalid value"))
    return error_json(ArenaError(ErrorCode.INVALID, f"{field}: {message}.", field=field))


api.add_exception_handler(ArenaError, _arena_error)
api.add_exception_handler(NinjaValidationError, _validation_error)
api.add_exception_handler(HttpError, ninja_http_error)
api.add_exception_handler(Http404, ninja_not_found)


def csrf_checked(
    patterns: list[URLPattern | URLResolver],
) -> list[URLPattern | URLResolver]:
    """The API's URL patterns with their views no longer CSRF-exempt, so that the middleware
    checks a POST (and answers its 403 through ``CSRF_FAILURE_VIEW``) before the operation,
    the method dispatch included, runs."""
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback.csrf_exempt = False  # type: ignore[attr-defined]
    return patterns


patterns, app_name, namespace = api.urls
urls = (csrf_checked(patterns), app_name, namespace)
