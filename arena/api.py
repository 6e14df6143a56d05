"""The JSON API's plumbing: request parsing and the one place domain errors become responses."""

import functools
import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from arena.errors import ArenaError
from arena.services.identity import voter_id_new

VOTER_SESSION_KEY = "arena_voter_id"


def json_body(request: HttpRequest) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        data = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise ArenaError(
            "invalid_json", "The request body is not valid JSON.", field="body"
        ) from None
    if not isinstance(data, dict):
        raise ArenaError("invalid_json", "The request body must be a JSON object.", field="body")
    return data


def session_identity(request: HttpRequest) -> tuple[str, str]:
    """The session key and pseudonymous voter id of this visitor, creating both if needed."""
    voter_id = request.session.get(VOTER_SESSION_KEY)
    if not voter_id:
        voter_id = voter_id_new()
        request.session[VOTER_SESSION_KEY] = voter_id
    if request.session.session_key is None or request.session.modified:
        request.session.save()
    assert request.session.session_key is not None
    return request.session.session_key, voter_id


def client_ip(request: HttpRequest) -> str | None:
    # REMOTE_ADDR only: a forwarded header is trusted only behind a proxy configured to set it,
    # which the deployment does through its ASGI server's --forwarded-allow-ips.
    return request.META.get("REMOTE_ADDR")


def api_view(func: Callable[..., Any]) -> Callable[..., HttpResponseBase]:
    """Turn a view returning (payload, status) or payload into JSON, and ArenaError into 4xx."""

    @functools.wraps(func)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            result = func(request, *args, **kwargs)
        except ArenaError as exc:
            return JsonResponse(exc.as_dict(), status=exc.status)
        if isinstance(result, HttpResponseBase):  # a page, a file, a stream
            return result
        status = 200
        if isinstance(result, tuple):
            result, status = result
        return JsonResponse(result, status=status)

    return wrapper
