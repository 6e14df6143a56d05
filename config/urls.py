from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from config.views import favicon
from environment.api import api as env_api

admin.site.site_header = "Arena administration"
admin.site.site_title = "Arena admin"


def _canonical(pattern_name: str) -> Callable[..., Any]:
    # The pages live without a trailing slash; a slash form redirects there, query kept.
    return RedirectView.as_view(pattern_name=pattern_name, permanent=True, query_string=True)


urlpatterns = [
    path(settings.ADMIN_URL, admin.site.urls),
    path("favicon.ico", favicon),
    path("leaderboard/", _canonical("ratings:leaderboard")),
    path("about/", _canonical("arena:about")),
    path("transparency/", _canonical("ratings:transparency")),
    # The environment API (django-ninja), before the arena's /api/ patterns.
    path("api/env/v1/", env_api.urls),
    path("", include("ratings.urls")),
    path("", include("arena.urls")),
]

handler400 = "config.views.bad_request"
handler403 = "config.views.permission_denied"
handler404 = "config.views.page_not_found"
handler500 = "config.views.server_error"
