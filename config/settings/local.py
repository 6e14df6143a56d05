"""Laptop defaults: DEBUG on, a fixed development key, every host on loopback."""

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="local-development-key-not-for-production")  # noqa: S105
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# The site's own 404 page for an unknown page, not Django's debug 404 listing every URL pattern.
MIDDLEWARE = [*MIDDLEWARE, "config.middleware.SiteNotFoundPageMiddleware"]  # noqa: F405
