"""Middleware of the laptop settings only (config/settings/local.py)."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

from arena.api import errors_as_json
from config.views import page_not_found


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
