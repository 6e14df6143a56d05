from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from django.views.i18n import set_language

from config.api import urls as api_urls
from config.views import favicon, javascript_catalog
from environment.api import api as env_api
from redteam.env_api import api as redteam_env_api

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
    # The language switcher's form posts here; the choice is kept in Django's language cookie.
    path("i18n/setlang/", set_language, name="set_language"),
    # The scripts' translations (the djangojs catalogue) as a script from 'self', which the CSP
    # allows; base.html loads it before the pages' own scripts.
    path("i18n/js/", javascript_catalog, name="javascript-catalog"),
    # The environment API (django-ninja), before the arena's /api/ patterns.
    path("api/env/v1/redteam/", redteam_env_api.urls),
    path("api/env/v1/", env_api.urls),
    path("redteam/leaderboard/", include("redteam.board_urls")),
    # The red-teaming arena's pages (the redteam app).
    path("redteam/", include("redteam.urls")),
    # Visitors' accounts: the arena's own pages (the personal board, the data, the deletion),
    # then django-allauth's (sign-in, sign-up, codes, sign-out, email addresses, providers).
    path("", include("accounts.urls")),
    path("account/", include("allauth.urls")),
    path("", include("ratings.urls")),
    path("", include("arena.urls")),
    # The visitor API and the leaderboard downloads (django-ninja), after the pages: its root
    # pattern, which ninja keeps to find its own prefix, would otherwise answer "/".
    path("", api_urls),
]

handler400 = "config.views.bad_request"
handler403 = "config.views.permission_denied"
handler404 = "config.views.page_not_found"
handler500 = "config.views.server_error"
