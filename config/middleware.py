"""The site's own middleware: the path check every request passes (config/settings/base.py)
and the laptop settings' 404 page (config/settings/local.py)."""

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponseBase

from arena.api import errors_as_json
from arena.inputs import text_problem, text_storable
from config.views import page_not_found


class UnstorablePathMiddleware:
    """A path holding a NUL or a lone surrogate names no page: a 404 before any view or URL
    converter sees it. A path parameter reaches a view's lookups as it is, and PostgreSQL
    refuses a NUL in any text it is sent (a 500 there); a lone surrogate cannot be encoded at
    all. Bodies and queries are checked where they are parsed (``arena.inputs``); this covers
    every route's path at once, the APIs' and the admin's included. The 404 passes through
    ``arena.api.ApiErrorMiddleware``, which gives it the JSON shape under /api/."""

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], HttpResponseBase]
        | Callable[[HttpRequest], Awaitable[HttpResponseBase]],
    ) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        # Raised before the chain goes on, sync or async: Django's wrapper around this
        # middleware turns it into the 404 answer.
        if text_problem(request.path_info) is not None:
            # The 404 page links back to its own path (the language switcher's ``next``), which
            # a lone surrogate would fail to encode: it shows U+FFFD in their place.
            request.path = text_storable(request.path)
            request.path_info = text_storable(request.path_info)
            raise Http404("The path holds a character no page has.")
        return self.get_response(request)


class SiteNotFoundPageMiddleware:
    """With DEBUG on, Django answers an unknown page with its debug 404, which lists every URL
    pattern of the site; the demo runs with DEBUG on, so its visitors would read that. This
    answers a page's 404 with the site's own 404 page instead, as production does. API paths
    and downloads keep their JSON 404 (``arena.api.ApiErrorMiddleware``).

    No page of the site renders a 404 of its own (they raise or fall through to
    ``handler404``), so every HTML 404 here is either Django's debug page or the site's."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if (
            settings.DEBUG
            and response.status_code == 404
            and not errors_as_json(request)
            and response.get("Content-Type", "").startswith("text/html")
        ):
            return page_not_found(request)
        return response
