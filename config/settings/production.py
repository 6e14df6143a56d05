"""Production settings: refuse to start without the secrets and services production needs."""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import (
    ALLOWED_HOSTS,
    CSRF_TRUSTED_ORIGINS,
    DATABASES,
    REDIS_URL,
    SECRET_KEY,
    env,
    env_float,
    public_origin,
)

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

# --- Database connection pool ---------------------------------------------------------------
# Django's psycopg pool, one per process: a request borrows a connection and gives it back when
# it ends, instead of opening one (a forked PostgreSQL backend, tens of ms on a loaded machine)
# per request. Kept connections (DATABASE_CONN_MAX_AGE) are no substitute under ASGI: each
# request's sync code runs in a thread of its own, a kept connection belongs to its thread, so
# they pile up until PostgreSQL refuses clients. At most DATABASE_POOL_MAX_SIZE connections per
# process (uvicorn worker, Celery process): requests beyond it wait up to
# DATABASE_POOL_TIMEOUT_SECONDS for one, then fail. 0 turns the pool off (a connection per
# request, or DATABASE_CONN_MAX_AGE's kept ones). Celery's prefork worker closes the pool around
# each task (its Django fix-up), so a task pays one connection, as without a pool.
DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=8)
if DATABASE_POOL_MAX_SIZE > 0:
    if DATABASES["default"].get("CONN_MAX_AGE"):
        raise ImproperlyConfigured(
            "DATABASE_CONN_MAX_AGE must be 0 while the connection pool is on "
            "(DATABASE_POOL_MAX_SIZE > 0): set one or the other."
        )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(env.int("DATABASE_POOL_MIN_SIZE", default=1), DATABASE_POOL_MAX_SIZE),
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": env_float("DATABASE_POOL_TIMEOUT_SECONDS", default=10.0),
    }

SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
# The proof-of-work challenge before a session's first vote: on unless ARENA_CHALLENGE=false.
ARENA_CHALLENGE = env.bool("ARENA_CHALLENGE", default=True)

# --- HTTPS ------------------------------------------------------------------------------------
# On by default: the site is served over HTTPS, normally by a TLS-terminating proxy in front of
# uvicorn. Whether a request came over HTTPS is decided by uvicorn, which reads X-Forwarded-Proto
# (and X-Forwarded-For) only from the proxies listed in ARENA_FORWARDED_ALLOW_IPS (bin/serve);
# SECURE_PROXY_SSL_HEADER is deliberately unset, since Django would trust that header from anyone.
# A plain-http run (a trial on one machine, the production-shape test) sets
#   DJANGO_SECURE_SSL_REDIRECT=false DJANGO_SECURE_COOKIES=false DJANGO_SECURE_HSTS_SECONDS=0
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
# The scheme of the links allauth writes where it has no request to take it from.
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "https" if SECURE_SSL_REDIRECT else "http"
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
LANGUAGE_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
# Both off by default: they bind every subdomain of the site's domain (and, once preloaded,
# every browser for months) to HTTPS, which only the domain's owner can decide for the whole
# domain. Django's deploy checks warn while they are off (security.W005, security.W021); those two
# warnings are silenced here as a decision, not an oversight: set the switches to turn them on.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS = ["security.W005", "security.W021"]

# --- The public origin ------------------------------------------------------------------------
# ARENA_PUBLIC_ORIGIN when set; else the first of DJANGO_CSRF_TRUSTED_ORIGINS (the origin a proxy
# serves the site on); else the first of DJANGO_ALLOWED_HOSTS, https unless the site serves plain
# http (DJANGO_SECURE_SSL_REDIRECT=false). Without one of them that names a single host (no
# wildcard), production refuses to start rather than link to whatever Host a client sent.
if env("ARENA_PUBLIC_ORIGIN", default=""):
    pass  # read and checked by base
elif CSRF_TRUSTED_ORIGINS and "*" not in CSRF_TRUSTED_ORIGINS[0]:
    ARENA_PUBLIC_ORIGIN = public_origin(CSRF_TRUSTED_ORIGINS[0], name="DJANGO_CSRF_TRUSTED_ORIGINS")
elif ALLOWED_HOSTS and ALLOWED_HOSTS[0] != "*" and not ALLOWED_HOSTS[0].startswith("."):
    ARENA_PUBLIC_ORIGIN = public_origin(
        f"{'https' if SECURE_SSL_REDIRECT else 'http'}://{ALLOWED_HOSTS[0]}",
        name="DJANGO_ALLOWED_HOSTS",
    )
else:
    raise ImproperlyConfigured(
        "Production settings need ARENA_PUBLIC_ORIGIN (such as https://arena.example.org), the "
        "origin of the site's links, when neither DJANGO_CSRF_TRUSTED_ORIGINS nor "
        "DJANGO_ALLOWED_HOSTS starts with a single host."
    )
