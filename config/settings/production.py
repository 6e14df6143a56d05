"""Production settings: refuse to start without the secrets and services production needs."""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import DATABASES, REDIS_URL, SECRET_KEY, env

DEBUG = env.bool("DJANGO_DEBUG", default=False)
ARENA_PRODUCTION = True

_missing = []
if not SECRET_KEY:
    _missing.append("DJANGO_SECRET_KEY")
if not env.list("DJANGO_ALLOWED_HOSTS", default=[]):
    _missing.append("DJANGO_ALLOWED_HOSTS")
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    _missing.append("DATABASE_URL (a postgres:// URL)")
if not REDIS_URL:
    _missing.append("REDIS_URL (redis:// URL for the cache, channel layer and Celery broker)")
if _missing:
    raise ImproperlyConfigured(
        "Production settings need these environment variables: " + ", ".join(_missing)
    )

SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=0)
