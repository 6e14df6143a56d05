from django.conf import settings
from django.contrib import admin
from django.urls import include, path

admin.site.site_header = "Arena administration"
admin.site.site_title = "Arena admin"

urlpatterns = [
    path(settings.ADMIN_URL, admin.site.urls),
    path("", include("ratings.urls")),
    path("", include("arena.urls")),
]
