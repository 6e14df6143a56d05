"""The scripts' translation catalogue, and the error handlers: the API's JSON error shape under /api/ and on downloads (``errors_as_json``),
a page for everyone else.

Wired in config/urls.py (handler400/403/404/500) and settings.CSRF_FAILURE_VIEW. None of them
shows a debug page or an exception's text; an unexpected exception has already been logged with
its traceback by Django (logger ``django.request``) before ``server_error`` runs.
"""

import hashlib
from pathlib import Path

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from django.template import loader
from django.templatetags.static import static
from django.utils import translation
from django.utils.translation import gettext
from django.views.decorators.cache import cache_control
from django.views.decorators.http import etag
from django.views.i18n import JavaScriptCatalog

from arena.api import (
    FORM_VIEWS,
    error_json,
    error_response,
    errors_as_json,
    form_unreadable,
    not_json,
)
from arena.errors import ErrorCode


def _catalogues_digest() -> str:
    """A digest of the compiled script catalogues, the same in every worker of one release."""
    digest = hashlib.sha256()
    for folder in settings.LOCALE_PATHS:
        for path in sorted(Path(folder).glob("*/LC_MESSAGES/djangojs.mo")):
            digest.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


_CATALOGUES_DIGEST = _catalogues_digest()


def _catalogue_etag(request: HttpRequest) -> str:
    # LocaleMiddleware has chosen the request's language by now: one tag per language.
    return f"{translation.get_language()}-{_CATALOGUES_DIGEST}"


# Every page loads it: the browser keeps it and asks again with If-None-Match, a 304 while the
# release and the language are the same (a new language cookie gives another tag).
javascript_catalog = cache_control(no_cache=True)(
    etag(_catalogue_etag)(JavaScriptCatalog.as_view())
)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponseBase:
    if errors_as_json(request):
        if isinstance(exception, RequestDataTooBig):
            return error_response(
                400,
                code=ErrorCode.REQUEST_TOO_LARGE,
                message=gettext("The request body is too large."),
            )
        if isinstance(exception, MultiPartParserError):  # a form Django could not even parse
            match = request.resolver_match
            if match is not None and match.view_name in FORM_VIEWS:
                return error_json(form_unreadable())
            return error_json(not_json(request.content_type or "multipart"))
        return error_response(400)
    return render(request, "400.html", status=400)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponseBase:
    if errors_as_json(request):
        return error_response(403)
    return render(request, "403.html", status=403)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponseBase:
    if errors_as_json(request):
        return error_response(404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponseBase:
    if errors_as_json(request):
        return error_response(500)
    # No request context and no database: whatever failed may be what a context would need.
    return HttpResponse(loader.get_template("500.html").render(), status=500)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponseBase:
    # ``reason`` is Django's wording ("CSRF cookie not set." ...); it names no secret, and
    # Django has already logged the failure (logger ``django.security.csrf``).
    if errors_as_json(request):
        return error_response(
            403,
            code=ErrorCode.CSRF_FAILED,
            message=gettext("CSRF check failed: %(reason)s Reload the page and try again.")
            % {"reason": reason},
        )
    return render(request, "403_csrf.html", {"reason": reason}, status=403)


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """``/favicon.ico``, which browsers ask for on pages that link no icon (the admin's): the
    site's SVG icon, under its hashed static name. Not permanent: the name changes with it."""
    return HttpResponseRedirect(static("favicon.svg"))
