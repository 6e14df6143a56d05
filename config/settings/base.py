"""Settings shared by every environment.

Why one module: cookiecutter-django's layout, one base module that every environment's settings
import; each setting sits beside its default, its bounds check and the comment that explains it.

Everything configurable is read from the environment through one django-environ reader. With
nothing set, the embedded defaults run on a laptop with no services: SQLite under ``var/``, an
in-memory channel layer, a local-memory cache and Celery tasks run eagerly. ``DATABASE_URL`` and
``REDIS_URL`` switch to PostgreSQL and Redis (cache, channel layer, Celery broker).
"""

import ipaddress
import math
import re
from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urlsplit

import django_stubs_ext
import environ
from csp.constants import NONE, SELF
from django.conf.locale import LANG_INFO
from django.core.exceptions import ImproperlyConfigured

from config.queues import TASK_ROUTES

# Lets Django's classes be subscripted in annotations and bases (ModelAdmin[Provider]) at run time.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
env_file = BASE_DIR / ".env"
if env_file.exists():
    environ.Env.read_env(str(env_file))


def env_float(name: str, *, default: float) -> float:
    """A number from the environment as Python reads it (``1e-4``, ``0.15``, ``inf``), or a
    refusal to start naming the setting: django-environ's own reader drops the ``e`` of an
    exponent and reads ``1e-4`` as ``1-4``."""
    raw = env.str(name, default="").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number; it is {raw!r}.") from None


def _bounded(name: str, value: float, low: float, high: float) -> None:
    """Refuse to start with a setting outside [low, high], naming it."""
    if not low <= value <= high:
        raise ImproperlyConfigured(f"{name} must be from {low} to {high}; it is {value}.")


DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
ALLOWED_HOSTS: list[str] = env.list("DJANGO_ALLOWED_HOSTS", default=[])
CSRF_TRUSTED_ORIGINS: list[str] = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])


def public_origin(value: str, *, name: str = "ARENA_PUBLIC_ORIGIN") -> str:
    """``value`` as an origin (``scheme://host[:port]``, no trailing slash), or a refusal to
    start naming ``name``."""
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or "@" in parts.netloc
        or "*" in parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ImproperlyConfigured(
            f"{name} must be an origin such as https://arena.example.org; it is {value!r}."
        )
    return f"{parts.scheme}://{parts.netloc.lower()}"


# The site's public origin, the one base of every absolute link it hands out (share pages' og:
# tags and their cards): never the Host header, which the client chooses. Production derives it
# when unset (config/settings/production.py).
ARENA_PUBLIC_ORIGIN = public_origin(
    env("ARENA_PUBLIC_ORIGIN", default="") or "http://127.0.0.1:8000"
)

# No "daphne": the ASGI server is uvicorn (bin/serve, for the demo too), and daphne's app (whose
# only use is to make `runserver` serve ASGI) loads Twisted into every process and command.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "axes",
    "channels",
    "csp",
    # Visitors' optional accounts (docs/accounts.md): django-allauth's accounts and social
    # accounts, the providers ARENA_SOCIAL_PROVIDERS names (below), and the arena's own pages.
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "arena",
    "environment",
    "ratings",
    "redteam",
    "accounts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The visitor's language (the language cookie, else Accept-Language), before everything that
    # answers: the API's error shapes (below) and the CSRF failure view are worded in it too. It
    # reads no session (Django 4+), and it precedes CommonMiddleware as Django asks.
    "django.middleware.locale.LocaleMiddleware",
    # Every error under /api/ leaves as the JSON error shape, whatever produced it (a 405 from a
    # method decorator, a 404 for an unknown path, a debug page): see arena/api.py.
    "arena.api.ApiErrorMiddleware",
    # A path with a NUL or a lone surrogate is a 404 before any URL converter or view reads it
    # (PostgreSQL refuses a NUL in a lookup): inside the one above, so it is JSON under /api/.
    "config.middleware.UnstorablePathMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # allauth's sign-in stages (a code sent, a code confirmed) and its redirects.
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_ratelimit.middleware.RatelimitMiddleware",
    # Last: turns a locked-out sign-in into its 429 answer (see "Sign-in throttling" below).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'arena.sqlite3'}"),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=0))
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The local/demo database, written from several threads at once (live battles): WAL lets
    # readers go on during a write and commits without an fsync each (synchronous=NORMAL is
    # safe with WAL: a power loss may lose the last commits, never corrupt); IMMEDIATE takes the
    # write lock at BEGIN, so concurrent transactions wait their turn (up to `timeout` seconds)
    # instead of failing with "database is locked" when a reader tries to become a writer.
    # Kept connections (DATABASE_CONN_MAX_AGE) spare each database call the opening of the file
    # and the PRAGMAs below; off unless set, as for PostgreSQL.
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=0))
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache, channel layer, Celery broker ---------------------------------------------
REDIS_URL = env("REDIS_URL", default="")

if REDIS_URL:
    # Redis down is a degraded site, not a 500 (arena/cache.py): reads miss, so sessions use
    # the database alone, and rate limits count per process until Redis returns. The timeouts
    # bound how long a request waits for a Redis that does not answer.
    CACHES = {
        "default": {
            "BACKEND": "arena.cache.FallbackRedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {
                "socket_connect_timeout": env_float("REDIS_CACHE_TIMEOUT_SECONDS", default=1.0),
                "socket_timeout": env_float("REDIS_CACHE_TIMEOUT_SECONDS", default=1.0),
            },
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_DEFAULT_QUEUE = "default"
# Every task's queue, in one table (config/queues.py).
CELERY_TASK_ROUTES = TASK_ROUTES
CELERY_TASK_SOFT_TIME_LIMIT = 300
CELERY_TASK_TIME_LIMIT = 360
CELERY_TASK_ACKS_LATE = True
# A task is acknowledged when it ends, so a worker that dies mid-task leaves it in the broker.
# A pool process killed under it (the OOM killer, SIGKILL) hands it back at once; a whole worker
# killed leaves it unacknowledged, and Redis hands it to a live worker once the visibility
# timeout has passed since its delivery (kombu's default is an hour). The timeout must exceed
# the longest task's hard time limit and the longest retry countdown (a task waiting for its
# countdown counts as delivered), or a task still running or waiting is handed out twice:
# arena.E005 checks both. A task that ends by its own time limit is acknowledged, not retried.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
_VISIBILITY_TIMEOUT = env.int("CELERY_VISIBILITY_TIMEOUT_SECONDS", default=20 * 60)
_bounded("CELERY_VISIBILITY_TIMEOUT_SECONDS", _VISIBILITY_TIMEOUT, 1, 7 * 24 * 3600)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": _VISIBILITY_TIMEOUT}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Sessions and security ------------------------------------------------------------------
SESSION_ENGINE = "django.contrib.sessions.backends.db"
SESSION_COOKIE_AGE = 60 * 60 * 24 * 30
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
# A CSRF failure answers in the API's JSON shape under /api/ and with a page otherwise.
CSRF_FAILURE_VIEW = "config.views.csrf_failure"

# Content-Security-Policy (django-csp), the same in every environment so that the browser tests
# prove the pages work under it. No inline script or style anywhere: templates load scripts by
# src, charts are SVG with presentation attributes, and scripts set styles only through the
# CSSOM (element.style), which style-src does not govern. connect-src 'self' covers the
# same-origin websocket (ws:/wss:) in CSP Level 3 browsers (Chromium, Firefox, Safari 15.4+).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# --- Sign-in throttling (django-axes) --------------------------------------------------------
# The admin's sign-in (any use of django.contrib.auth's authenticate()): after
# ARENA_LOGIN_FAILURE_LIMIT wrong passwords for one username from one address, that pair is
# refused, the right password included, for ARENA_LOGIN_LOCKOUT_MINUTES (each further try
# during the lock starts it again); other users and other addresses are not affected. A
# successful sign-in clears the count. Attempts are kept in PostgreSQL (axes' database handler,
# so throttling holds while Redis is down), shown in the admin under "Axes", and a lock is
# lifted early with `manage.py axes_reset_username NAME` or by deleting its access attempts.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Visitors' accounts: an email and a password (a code needs no backend's authenticate()).
    "allauth.account.auth_backends.AuthenticationBackend",
]
AXES_FAILURE_LIMIT = env.int("ARENA_LOGIN_FAILURE_LIMIT", default=5)
_LOCKOUT_MINUTES = env_float("ARENA_LOGIN_LOCKOUT_MINUTES", default=15)
AXES_COOLOFF_TIME = timedelta(minutes=_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A visitor signs in with an email, the admin with a username: each is the "username" counted.
AXES_USERNAME_CALLABLE = "accounts.throttling.axes_username"
# The peer's address as the ASGI server reports it (the proxy's X-Forwarded-For only from the
# proxies in ARENA_FORWARDED_ALLOW_IPS), as for the rate limits: never a header of the client's.
AXES_CLIENT_IP_CALLABLE = "arena.api.client_ip"
AXES_COOLOFF_MESSAGE = (
    "Too many failed sign-ins for this account from your address: signing in is locked for "
    f"{_LOCKOUT_MINUTES:g} minutes after the last attempt. Try again later."
)

# --- Visitors' accounts (django-allauth; docs/accounts.md) ------------------------------------
# Optional: nothing on the battle page needs one; a signed-in visitor's votes record the account.
# An email address is the account's name; a new account's address is confirmed by a code mailed
# to it, then the visitor signs in with a code mailed each time ("login by code") or with the
# password chosen at sign-up, which is optional. allauth's rate limits (ACCOUNT_RATE_LIMITS, its
# defaults: codes per address and per email, failed sign-ins) stay on.
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1"]
ACCOUNT_FORMS = {"signup": "accounts.forms.SignupForm"}  # says the password is optional
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_EMAIL_VERIFICATION_BY_CODE_ENABLED = True
ACCOUNT_LOGIN_BY_CODE_ENABLED = True
ACCOUNT_SESSION_REMEMBER = True
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[Arena] "
ACCOUNT_LOGOUT_REDIRECT_URL = "/"
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "accounts:account"
# Messages ("You have signed in") are kept in a cookie, never in the session: a page that shows
# them reads no session for it (base.html shows them under the header).
MESSAGE_STORAGE = "django.contrib.messages.storage.cookie.CookieStorage"
# The sign-in providers offered besides email, comma-separated allauth provider ids (github,
# google, gitlab, openid_connect...): each one's app is installed; its client id and secret are
# a "Social application" the operator adds in the admin. None by default.
ARENA_SOCIAL_PROVIDERS: list[str] = [
    p.strip().lower() for p in env.list("ARENA_SOCIAL_PROVIDERS", default=[]) if p.strip()
]
_PROVIDERS_DIR = Path(str(find_spec("allauth").origin)).parent / "socialaccount" / "providers"  # type: ignore[union-attr]
for _provider in ARENA_SOCIAL_PROVIDERS:
    if not re.fullmatch(r"[a-z0-9_]+", _provider) or not (_PROVIDERS_DIR / _provider).is_dir():
        raise ImproperlyConfigured(
            f"ARENA_SOCIAL_PROVIDERS holds {_provider!r}, which is no django-allauth provider id "
            "(such as github, google, gitlab or openid_connect)."
        )
    INSTALLED_APPS.append(f"allauth.socialaccount.providers.{_provider}")
# Outgoing mail (sign-in and confirmation codes): EMAIL_URL is django-environ's email URL, such
# as smtp+tls://user:password@smtp.example.org:587 (smtp+ssl:// for port 465); unset, each mail
# is printed on the web process's standard output (the console backend), which the demo wants.
# Kept out of the settings' names: Django's debug page masks EMAIL_HOST_PASSWORD, not a URL.
_EMAIL_URL = env("EMAIL_URL", default="") or "consolemail://"
globals().update(environ.Env.email_url_config(_EMAIL_URL))
# A mail server that does not answer fails the sign-in after this long, not never.
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = env("DJANGO_DEFAULT_FROM_EMAIL", default="") or "Arena <arena@localhost>"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Languages (docs/i18n.md) -----------------------------------------------------------------
# The interface's languages, as codes with a catalogue under locale/ (English needs none); the
# first is the default, for a visitor whose cookie and Accept-Language name none of them.
_LANGUAGE_CODES = [
    c.strip().lower() for c in env.list("ARENA_LANGUAGES", default=["en", "fr"]) if c.strip()
]
LANGUAGES = []
for _code in _LANGUAGE_CODES:
    if _code not in LANG_INFO or "name" not in LANG_INFO[_code]:
        raise ImproperlyConfigured(
            f"ARENA_LANGUAGES holds {_code!r}, which is no language code Django knows "
            "(such as en, fr, da, lt or sv)."
        )
    LANGUAGES.append((_code, LANG_INFO[_code]["name"]))
if not LANGUAGES:
    raise ImproperlyConfigured("ARENA_LANGUAGES must name at least one language, such as en.")
LANGUAGE_CODE = LANGUAGES[0][0]
LOCALE_PATHS = [BASE_DIR / "locale"]
# The visitor's choice from the language switcher (Django's set_language), kept for a year.
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SAMESITE = "Lax"
TIME_ZONE = "UTC"
USE_I18N = True
# Numbers and dates shown in pages follow the visitor's language (a French page writes 0,5);
# thousands are not grouped, since templates also write counts into attributes and links.
USE_THOUSAND_SEPARATOR = False
USE_TZ = True

# --- Static files (vendored, served by whitenoise) ------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where collectstatic writes (and whitenoise serves from); the image builds it at build time.
STATIC_ROOT = Path(env("DJANGO_STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "config.storage.StaticFilesStorage"},
}

# --- Arena ----------------------------------------------------------------------------------
# The admin lives at a configurable path so that it is not where scanners look first.
ADMIN_URL = env("DJANGO_ADMIN_URL", default="admin/")
# Salt for the one-way hash of a voter's IP address; the raw address is never stored.
ARENA_IP_HASH_SALT = env("ARENA_IP_HASH_SALT", default="")
# Key of the battles' session hashes (arena.identity.session_hash); empty derives one
# from SECRET_KEY. Changing it detaches open battles from their visitors.
ARENA_SESSION_HASH_KEY = env("ARENA_SESSION_HASH_KEY", default="")
# Key of the exports' judge ids (arena.exports.judge_hash); empty uses SECRET_KEY as before, so
# ids stay stable until it is set. Set it before rotating SECRET_KEY; changing it changes every id.
ARENA_JUDGE_HASH_KEY = env("ARENA_JUDGE_HASH_KEY", default="")
ARENA_TERMS_VERSION = env("ARENA_TERMS_VERSION", default="2026-11")
RATELIMIT_ENABLE = env.bool("ARENA_RATELIMIT_ENABLE", default=True)
ARENA_RATELIMIT_BATTLES = env("ARENA_RATELIMIT_BATTLES", default="120/m")
ARENA_RATELIMIT_VOTES = env("ARENA_RATELIMIT_VOTES", default="60/m")
# Live model calls (starts, follow-ups, regenerations) per client address, over the websocket.
ARENA_RATELIMIT_LIVE = env("ARENA_RATELIMIT_LIVE", default="30/m")
RATELIMIT_VIEW = "arena.views.ratelimited"
# Daily caps on votes (per UTC day), per session and per client address (its salted hash),
# counted in the cache like the rate limits; 0 turns a cap off. Over a cap: 429 vote_cap.
ARENA_VOTES_PER_SESSION_PER_DAY = env.int("ARENA_VOTES_PER_SESSION_PER_DAY", default=300)
ARENA_VOTES_PER_IP_PER_DAY = env.int("ARENA_VOTES_PER_IP_PER_DAY", default=1000)
# Red teaming: attempts one player may start against one model per UTC day (0: no cap), so a
# player cannot farm one weak model's successes; the next attempt is drawn from the others.
ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY = env.int("ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY", default=5)
# ... and every session from one client address together (its salted hash, counted in the cache
# as the votes' caps are), so new sessions from one address do not buy more (0: no cap).
ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY = env.int(
    "ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY", default=20
)
_bounded("ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY", ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY, 0, 1_000_000)
_bounded(
    "ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY", ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY, 0, 1_000_000
)
# A proof-of-work challenge (ALTCHA, self-hosted) before a session's first vote. Off here and in
# local and test settings; production.py turns it on unless ARENA_CHALLENGE=false. The HMAC key
# signs the challenges: empty derives one from SECRET_KEY for this one purpose.
ARENA_CHALLENGE = env.bool("ARENA_CHALLENGE", default=False)
ARENA_CHALLENGE_HMAC_KEY = env("ARENA_CHALLENGE_HMAC_KEY", default="")
# The solver tries on average half of this many SHA-256 hashes (static/js/challenge.js: about
# 0.4 s in Chromium on a busy two-core machine, begun when the page loads).
ARENA_CHALLENGE_MAX_NUMBER = env.int("ARENA_CHALLENGE_MAX_NUMBER", default=100_000)
ARENA_CHALLENGE_EXPIRES_SECONDS = env.int("ARENA_CHALLENGE_EXPIRES_SECONDS", default=600)
# Moderation of live prompts before any model is called: the OpenAI moderation endpoint of the
# Provider named here (its base_url and key), else the local blocklist: a file path (one word
# or phrase a line, # comments) or a comma-separated list; empty blocks nothing.
ARENA_MODERATION_PROVIDER = env("ARENA_MODERATION_PROVIDER", default="")
ARENA_MODERATION_MODEL = env("ARENA_MODERATION_MODEL", default="omni-moderation-latest")
ARENA_MODERATION_TIMEOUT_SECONDS = env_float("ARENA_MODERATION_TIMEOUT_SECONDS", default=5.0)
ARENA_MODERATION_BLOCKLIST = env("ARENA_MODERATION_BLOCKLIST", default="")

# --- Images in live prompts (arena.live.images) -------------------------------------------
# Stored through Django's storage API (STORAGES["default"]: files under MEDIA_ROOT unless an
# S3-compatible backend is configured, docs/deployment.md); served by arena.views.prompt_image.
MEDIA_ROOT = Path(env("DJANGO_MEDIA_ROOT", default=str(VAR_DIR / "media")))
MEDIA_URL = "/media/"
# An upload's bytes, as sent and as stored (re-encoded), at most; over it is refused.
ARENA_IMAGE_MAX_BYTES = env.int("ARENA_IMAGE_MAX_BYTES", default=10 * 1024 * 1024)
# Pixels (width x height) and the longer side over the shorter at most, read from the header
# and refused before any decoding. A 16 MP photo decodes and re-encodes in 0.2-0.3 s of CPU on
# two busy cores (bench/uploads.py).
ARENA_IMAGE_MAX_PIXELS = env.int("ARENA_IMAGE_MAX_PIXELS", default=16_000_000)
ARENA_IMAGE_MAX_ASPECT_RATIO = env.int("ARENA_IMAGE_MAX_ASPECT_RATIO", default=20)
# CPU seconds of the web worker's thread one upload's check and re-encoding may take; past it
# the upload is refused (400 invalid_file). Above the 16 MP photo's cost so that a busy machine
# does not refuse one.
ARENA_IMAGE_CPU_SECONDS = env_float("ARENA_IMAGE_CPU_SECONDS", default=0.4)
ARENA_IMAGE_MAX_PER_PROMPT = env.int("ARENA_IMAGE_MAX_PER_PROMPT", default=4)
_bounded("ARENA_IMAGE_MAX_BYTES", ARENA_IMAGE_MAX_BYTES, 1024, 100 * 1024 * 1024)
_bounded("ARENA_IMAGE_MAX_PIXELS", ARENA_IMAGE_MAX_PIXELS, 64, 100_000_000)
_bounded("ARENA_IMAGE_MAX_ASPECT_RATIO", ARENA_IMAGE_MAX_ASPECT_RATIO, 1, 1000)
_bounded("ARENA_IMAGE_CPU_SECONDS", ARENA_IMAGE_CPU_SECONDS, 0.05, 30)
_bounded("ARENA_IMAGE_MAX_PER_PROMPT", ARENA_IMAGE_MAX_PER_PROMPT, 1, 16)
# Bytes of stored images not yet sent with a prompt, per session and per client address (its
# salted hash) per UTC day, counted in the cache; a battle that takes an image gives its bytes
# back. Over one: 429 image_quota. 0 turns a quota off.
ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION = env.int(
    "ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION", default=100 * 1024 * 1024
)
ARENA_IMAGE_UNATTACHED_BYTES_PER_IP = env.int(
    "ARENA_IMAGE_UNATTACHED_BYTES_PER_IP", default=500 * 1024 * 1024
)
_bounded(
    "ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION",
    ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION,
    0,
    100 * 1024**3,
)
_bounded(
    "ARENA_IMAGE_UNATTACHED_BYTES_PER_IP", ARENA_IMAGE_UNATTACHED_BYTES_PER_IP, 0, 100 * 1024**3
)
# Images when no moderation provider is configured: allow, or refuse every image prompt.
ARENA_IMAGE_POLICY = env("ARENA_IMAGE_POLICY", default="allow")
if ARENA_IMAGE_POLICY not in ("allow", "refuse"):
    raise ImproperlyConfigured(
        f"ARENA_IMAGE_POLICY must be allow or refuse; it is {ARENA_IMAGE_POLICY!r}."
    )
ARENA_RATELIMIT_UPLOADS = env("ARENA_RATELIMIT_UPLOADS", default="30/m")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "filters": {"client_errors_one_line": {"()": "config.log_filters.ClientErrorsOneLine"}},
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", default="INFO")},
    # django-axes logs every start and sign-in at INFO; its warnings (repeated failures, locks)
    # are what an operator needs.
    # The openai client's HTTP layer (httpx2; httpx where that is the transport) logs every
    # request at INFO: a line, and the loop's time to format and write it, per live answer.
    # Failed answers are logged by arena.live with their cause.
    # A request Django refuses with a 4xx (a multipart body without a boundary, a body too
    # large, a bad Host) is logged on one line, without the traceback of the client's error.
    "loggers": {
        **{
            name: {"filters": ["client_errors_one_line"]}
            for name in (
                "django.request",
                "django.security.DisallowedHost",
                "django.security.RequestDataTooBig",
                "django.security.TooManyFieldsSent",
                "django.security.TooManyFilesSent",
            )
        },
        "axes": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}

from config.schedule import BEAT_SCHEDULE, REWARD_MODEL_SCHEDULE  # noqa: E402

CELERY_BEAT_SCHEDULE = BEAT_SCHEDULE
# A vote cast sooner than this after the answers were complete is kept but flagged.
ARENA_MIN_VOTE_SECONDS = env_float("ARENA_MIN_VOTE_SECONDS", default=1.0)
# Anomalous voters (ratings.voters, Chiang et al. 2024 section 5.1): a voter with at least
# ARENA_ANOMALY_MIN_VOTES tested votes whose p-value is below the threshold is flagged with all
# their votes; the p-value is Bonferroni's over three tests (the crowd's rates on each pair,
# Fisher's method; the voter x model test and the goodness of fit against the fitted ratings).
# With V voters and sources tested the expected number of honest ones flagged per run is at most
# V x threshold (1 for 1,000 voters at 1e-3). 1e-3 rather than 1e-4: bench/rigging.py's ten
# sessions from ten addresses lifting one model keep 1 session unflagged at 1e-3 (+15 points)
# and 2 at 1e-4 (+36); neither flags one of its 120 honest voters nor one of the demo's 65
# expert judges (whose smallest p-value is 2e-3).
ARENA_ANOMALY_MIN_VOTES = env.int("ARENA_ANOMALY_MIN_VOTES", default=10)
ARENA_ANOMALY_P_THRESHOLD = env_float("ARENA_ANOMALY_P_THRESHOLD", default=1e-3)
# Sessions with the same address hash and user-agent class whose first votes follow each other
# within this many minutes are also tested as one source; a flagged source flags all its
# sessions' votes.
ARENA_ANOMALY_SOURCE_WINDOW_MINUTES = env_float("ARENA_ANOMALY_SOURCE_WINDOW_MINUTES", default=60)
_bounded("ARENA_ANOMALY_MIN_VOTES", ARENA_ANOMALY_MIN_VOTES, 1, math.inf)
if not 0 < ARENA_ANOMALY_P_THRESHOLD < 1:
    raise ImproperlyConfigured(
        f"ARENA_ANOMALY_P_THRESHOLD must be between 0 and 1; it is {ARENA_ANOMALY_P_THRESHOLD}."
    )
_bounded("ARENA_ANOMALY_SOURCE_WINDOW_MINUTES", ARENA_ANOMALY_SOURCE_WINDOW_MINUTES, 0, 7 * 24 * 60)
# Active pair sampling (arena.sampling): pairs by how much one more battle narrows their interval,
# from the latest snapshot, with ARENA_SAMPLING_FLOOR of the draws spread evenly over every pair.
# Off: models by sampling weight alone.
ARENA_ACTIVE_SAMPLING = env.bool("ARENA_ACTIVE_SAMPLING", default=True)
ARENA_SAMPLING_FLOOR = env_float("ARENA_SAMPLING_FLOOR", default=0.2)
# Bridging (arena.services.bridge): while a live model is preliminary in the latest snapshot
# (fewer than RATINGS_ESTABLISHED_MIN_VOTES rated votes, or not connected to the rated models),
# this share of the pool draws is a mixed battle for it: a pool prompt answered live by it
# against an established model's stored answer. 0 turns bridging off.
ARENA_BRIDGE_SHARE = env_float("ARENA_BRIDGE_SHARE", default=0.25)
_bounded("ARENA_BRIDGE_SHARE", ARENA_BRIDGE_SHARE, 0, 1)

# --- Ratings --------------------------------------------------------------------------------
# How the leaderboard snapshot is fitted (see ratings/services.py, ratings/categories.py and
# ratings/fits.py). Changing any of these makes the next run write a new snapshot even when no
# vote has arrived.
RATINGS_CI = env("RATINGS_CI", default="sandwich")  # "sandwich" or "bootstrap"
RATINGS_BOOTSTRAP_ROUNDS = env.int("RATINGS_BOOTSTRAP_ROUNDS", default=100)
RATINGS_SEED = env.int("RATINGS_SEED", default=0)
# Bootstrap threads (the result does not depend on it); unset: min(2, CPUs).
RATINGS_BOOTSTRAP_WORKERS = env.int("RATINGS_BOOTSTRAP_WORKERS", default=None)
# A category with fewer votes than this is shown as "not enough votes" instead of being fitted.
RATINGS_MIN_CATEGORY_VOTES = env.int("RATINGS_MIN_CATEGORY_VOTES", default=30)
# "Long prompts": battles whose user turns hold at least this many characters in total.
RATINGS_LONG_PROMPT_CHARS = env.int("RATINGS_LONG_PROMPT_CHARS", default=500)
# A recorded vote enqueues a refresh this many seconds later; votes in between share that run.
RATINGS_REFRESH_DEBOUNCE_SECONDS = env.int("RATINGS_REFRESH_DEBOUNCE_SECONDS", default=60)
RATINGS_REFRESH_ON_VOTE = env.bool("RATINGS_REFRESH_ON_VOTE", default=True)
# With eager tasks (no broker), refit in a background thread rather than inside the vote request.
RATINGS_EAGER_REFRESH_IN_BACKGROUND = env.bool("RATINGS_EAGER_REFRESH_IN_BACKGROUND", default=True)
# More rated votes than this are not loaded into memory at once (the in-memory refit holds about
# 4.3 KB per vote: 430 MB at 100,000): the refit writes them to a temporary Parquet file (in
# RATINGS_SPILL_DIR; unset: the system's temporary directory) from one streamed COPY of the
# votes' flat columns (the style counts' parts extracted by PostgreSQL), one Parquet row group per
# RATINGS_STREAM_BATCH_ROWS votes (a few hundred bytes each while parsed), and fits each view
# from it with sandwich intervals (no bootstrap on that path; the snapshot's params say so).
RATINGS_STREAM_THRESHOLD = env.int("RATINGS_STREAM_THRESHOLD", default=250_000)
RATINGS_STREAM_BATCH_ROWS = env.int("RATINGS_STREAM_BATCH_ROWS", default=10_000)
RATINGS_SPILL_DIR = env("RATINGS_SPILL_DIR", default=None)
# Repeated visitors' prompts (first turn case-folded, whitespace collapsed, end punctuation
# stripped, NFKC: arena.prompt_text) count at most this many rated votes each, the first by
# vote id, as LMArena caps its most repeated prompts (mostly greetings) at 25; pool prompts are
# never capped. 0: no cap.
RATINGS_DUPLICATE_PROMPT_CAP = env.int("RATINGS_DUPLICATE_PROMPT_CAP", default=25)
_bounded("RATINGS_DUPLICATE_PROMPT_CAP", RATINGS_DUPLICATE_PROMPT_CAP, 0, 1_000_000)
# Whether visitors' reactions count in the ranking: a tie or both-bad vote whose two answers got
# opposite reactions before the reveal is rated a win of the liked one. Off: votes alone.
RATINGS_COUNT_REACTIONS = env.bool("RATINGS_COUNT_REACTIONS", default=False)
# One source's influence (its address hash; its session where no address was kept): its rated
# votes on a model count at most max(RATINGS_SOURCE_MIN_VOTES, RATINGS_SOURCE_MAX_SHARE x the
# model's votes from every other source), the first by vote id; the rest are left out of the fit
# (so one source holds at most 13% of a model's evidence at the default share once past the
# floor). 0.15 keeps 1,744 of the demo's 1,751 expert votes (the MT-bench authors' heaviest judge
# gave one model 14% of its votes); 0 switches the cap off. Environment rewards count at most
# ARENA_ENV_SOURCE_MIN_VOTES of a source's votes on a completion, or the same share.
RATINGS_SOURCE_MAX_SHARE = env_float("RATINGS_SOURCE_MAX_SHARE", default=0.15)
RATINGS_SOURCE_MIN_VOTES = env.int("RATINGS_SOURCE_MIN_VOTES", default=20)
ARENA_ENV_SOURCE_MIN_VOTES = env.int("ARENA_ENV_SOURCE_MIN_VOTES", default=1)
_bounded("RATINGS_SOURCE_MAX_SHARE", RATINGS_SOURCE_MAX_SHARE, 0, 10)
_bounded("RATINGS_SOURCE_MIN_VOTES", RATINGS_SOURCE_MIN_VOTES, 1, 1_000_000)
_bounded("ARENA_ENV_SOURCE_MIN_VOTES", ARENA_ENV_SOURCE_MIN_VOTES, 1, 1_000_000)
# Bursts of new sources (ratings/engine/cohorts.py): every refit groups the votes by when they
# were cast, in windows of each of RATINGS_COHORT_WINDOWS_HOURS, and tests each window's votes
# from untrusted sources against a fit of every other vote, per model. A model whose cohort
# stands out by more than RATINGS_COHORT_Z_DETECT standard deviations has the cohort's largest
# contributors' votes on it held out (flag cohort_burst) until what is left is within
# RATINGS_COHORT_Z_RELEASE; the next refit tests again and lifts the flag when the burst no longer
# stands out. A source (address, session or account) is trusted for the votes it casts
# RATINGS_COHORT_TRUSTED_DAYS after its first. A model needs RATINGS_COHORT_MIN_VOTES cohort
# votes to be tested. Publicly documented; an operator may keep the values to themself.
RATINGS_COHORT_TEST = env.bool("RATINGS_COHORT_TEST", default=True)
try:
    RATINGS_COHORT_WINDOWS_HOURS = [
        float(x) for x in env.list("RATINGS_COHORT_WINDOWS_HOURS", default=["24", "168"])
    ]
except ValueError:
    raise ImproperlyConfigured(
        "RATINGS_COHORT_WINDOWS_HOURS must be numbers of hours separated by commas."
    ) from None
RATINGS_COHORT_Z_DETECT = env_float("RATINGS_COHORT_Z_DETECT", default=4.0)
RATINGS_COHORT_Z_RELEASE = env_float("RATINGS_COHORT_Z_RELEASE", default=1.0)
RATINGS_COHORT_TRUSTED_DAYS = env_float("RATINGS_COHORT_TRUSTED_DAYS", default=30)
RATINGS_COHORT_MIN_VOTES = env.int("RATINGS_COHORT_MIN_VOTES", default=10)
for _hours in RATINGS_COHORT_WINDOWS_HOURS:
    _bounded("RATINGS_COHORT_WINDOWS_HOURS", _hours, 1, 24 * 366)
_bounded("RATINGS_COHORT_Z_DETECT", RATINGS_COHORT_Z_DETECT, 1, 100)
_bounded("RATINGS_COHORT_Z_RELEASE", RATINGS_COHORT_Z_RELEASE, 0, RATINGS_COHORT_Z_DETECT)
_bounded("RATINGS_COHORT_TRUSTED_DAYS", RATINGS_COHORT_TRUSTED_DAYS, 0, 3650)
_bounded("RATINGS_COHORT_MIN_VOTES", RATINGS_COHORT_MIN_VOTES, 1, 1_000_000)
# A model with fewer rated votes than this in a view is "preliminary": shown with its rating and
# interval, marked, never ranked above the others, and left out of the mean that sets the scale
# (so its votes do not move the established models). At 50 votes a 95% interval is about +-96
# points (ratings/engine/result.py); 0 makes every rated model established.
RATINGS_ESTABLISHED_MIN_VOTES = env.int("RATINGS_ESTABLISHED_MIN_VOTES", default=50)
# A left/right position term in the fit: one coefficient (with its standard error, on
# /transparency) for the log-odds advantage of the answer shown on the left (side A).
RATINGS_POSITION = env.bool("RATINGS_POSITION", default=False)
# Inverse-propensity weights: each vote counts 1 / P(its pair is drawn), P read at fit time from
# the sampling policy in force (arena.sampling), floored at RATINGS_PROPENSITY_MIN_SHARE / the
# number of pairs so no pair counts more than 1 / that share times its uniform weight.
RATINGS_INVERSE_PROPENSITY = env.bool("RATINGS_INVERSE_PROPENSITY", default=False)
RATINGS_PROPENSITY_MIN_SHARE = env_float("RATINGS_PROPENSITY_MIN_SHARE", default=0.1)
_bounded("RATINGS_PROPENSITY_MIN_SHARE", RATINGS_PROPENSITY_MIN_SHARE, 0.001, 1)
# "slug=rating" pins that model's rating instead of centring the established models on 1000;
# a view where it is missing or preliminary falls back to that centring with a warning.
RATINGS_ANCHOR_MODEL = env("RATINGS_ANCHOR_MODEL", default="")
_bounded("RATINGS_ESTABLISHED_MIN_VOTES", RATINGS_ESTABLISHED_MIN_VOTES, 0, 1_000_000)
if RATINGS_ANCHOR_MODEL:
    _slug, _sep, _rating = RATINGS_ANCHOR_MODEL.rpartition("=")
    try:
        _anchor_rating = float(_rating) if _sep and _slug.strip() else math.nan
    except ValueError:
        _anchor_rating = math.nan
    if not 0 < _anchor_rating < 10_000:
        raise ImproperlyConfigured(
            "RATINGS_ANCHOR_MODEL must look like slug=rating with a rating from 0 to 10000 "
            f"(such as gpt-4=1200); it is {RATINGS_ANCHOR_MODEL!r}."
        )

# --- Live battles ---------------------------------------------------------------------------
# Defaults for the limits; a staff member overrides any of them in the admin (Live battle limits).
# A Python block run in the visitor's browser (Pyodide in a Web Worker) is stopped after this
# many seconds of running (Pyodide's first load does not count).
ARENA_CODE_RUN_SECONDS = env_float("ARENA_CODE_RUN_SECONDS", default=10.0)
_bounded("ARENA_CODE_RUN_SECONDS", ARENA_CODE_RUN_SECONDS, 0.5, 600)
ARENA_LIVE_MAX_PROMPT_CHARS = env.int("ARENA_LIVE_MAX_PROMPT_CHARS", default=8000)
ARENA_LIVE_MAX_TURNS = env.int("ARENA_LIVE_MAX_TURNS", default=8)
ARENA_LIVE_MAX_OUTPUT_TOKENS = env.int("ARENA_LIVE_MAX_OUTPUT_TOKENS", default=1024)
ARENA_LIVE_MAX_CONCURRENT_BATTLES = env.int("ARENA_LIVE_MAX_CONCURRENT_BATTLES", default=2)
# A battle left "streaming" longer than this (a crashed worker) no longer counts as running.
ARENA_LIVE_STALE_SECONDS = env.int("ARENA_LIVE_STALE_SECONDS", default=900)
# Wall-clock bound on one answer, whatever the upstream does (an endless stream ends here).
ARENA_LIVE_ANSWER_SECONDS = env_float("ARENA_LIVE_ANSWER_SECONDS", default=300.0)
# How often the partial text of a streaming answer is written to the database.
ARENA_LIVE_SAVE_SECONDS = env_float("ARENA_LIVE_SAVE_SECONDS", default=5.0)
# Circuit breaker: this many consecutive failed answers open it for the cool-down.
ARENA_LIVE_BREAKER_FAILURES = env.int("ARENA_LIVE_BREAKER_FAILURES", default=3)
ARENA_LIVE_BREAKER_COOLDOWN_SECONDS = env_float("ARENA_LIVE_BREAKER_COOLDOWN_SECONDS", default=60.0)
# Answer pieces are buffered this long per socket and sent as one frame (both sides' together);
# 0 sends them on the next event-loop iteration. It is the most a piece waits.
ARENA_DELTA_COALESCE_MS = env_float("ARENA_DELTA_COALESCE_MS", default=2.0)
# The process streaming a battle marks it alive for this long, refreshed every third of it; a
# battle still streaming without a mark (its worker was killed) is settled by the next request
# for it (a vote, a regenerate, a follow-up, the page's reconnect) instead of by the sweep.
ARENA_LIVE_OWNER_TTL_SECONDS = env_float("ARENA_LIVE_OWNER_TTL_SECONDS", default=15.0)

# --- The HTTP server (config/protocols.py, selected by bin/serve) -----------------------------
# A request's head (request line and headers) must arrive within this many seconds of its first
# byte (or of the connection's opening), or the connection is closed (slowloris); 0: no bound.
ARENA_HTTP_HEADER_TIMEOUT_SECONDS = env_float("ARENA_HTTP_HEADER_TIMEOUT_SECONDS", default=10.0)
# The longest head taken (bytes): a longer URL is a 414, longer headers a 431.
ARENA_HTTP_MAX_HEAD_BYTES = env.int("ARENA_HTTP_MAX_HEAD_BYTES", default=65536)

# --- Battle sockets -------------------------------------------------------------------------
# Sockets one client address may hold open at once, over every worker (0: no cap); the next is
# told so in an error frame and closed with code 4429.
ARENA_WS_MAX_PER_ADDRESS = env.int("ARENA_WS_MAX_PER_ADDRESS", default=32)
# A socket with no frame from the page and nothing streaming for this long is closed (code
# 4408); the page opens a new one when it next sends. 0: never.
ARENA_WS_IDLE_SECONDS = env_float("ARENA_WS_IDLE_SECONDS", default=120.0)
# The largest frame a socket reads (bytes). The largest the page sends is a start with the
# longest prompt allowed, every character JSON-escaped at most 6 bytes (a control character,
# \u0001), plus the frame's other fields; above the limit a frame is refused unread (code
# 1009). bin/serve gives uvicorn the same limit (--ws-max-size). A staff member who raises the
# prompt limit above ARENA_LIVE_MAX_PROMPT_CHARS in the admin raises this setting too.
ARENA_WS_MAX_FRAME_BYTES = env.int(
    "ARENA_WS_MAX_FRAME_BYTES", default=6 * ARENA_LIVE_MAX_PROMPT_CHARS + 4096
)

# --- Environment API (environment) ----------------------------------------------------------
# The reward model (ratings.reward_model; docs: "Instant rewards"): runs created with
# "reward_model": true get a model reward and interval for each completion at once, superseded
# by the visitors' when their votes give one. Off by default; on only where the reward-model
# extra (requirements/reward-model.txt: torch on the CPU, sentence-transformers and the bundled
# all-MiniLM-L6-v2) is installed, with a worker of the "rewardmodel" queue. A refit is queued
# ARENA_REWARD_MODEL_DEBOUNCE_SECONDS after the first vote of a window and reads the newest
# ARENA_REWARD_MODEL_MAX_VOTES unflagged votes. Embedding their distinct answers is the slow
# part (20-50 ms an answer on a busy two-core machine): 5,000 votes stay well inside the
# refit's 15-minute limit even when every answer differs.
ARENA_REWARD_MODEL = env.bool("ARENA_REWARD_MODEL", default=False)
ARENA_REWARD_MODEL_DEBOUNCE_SECONDS = env.int("ARENA_REWARD_MODEL_DEBOUNCE_SECONDS", default=300)
ARENA_REWARD_MODEL_MAX_VOTES = env.int("ARENA_REWARD_MODEL_MAX_VOTES", default=5_000)
_bounded(
    "ARENA_REWARD_MODEL_DEBOUNCE_SECONDS", ARENA_REWARD_MODEL_DEBOUNCE_SECONDS, 0, 7 * 24 * 3600
)
_bounded("ARENA_REWARD_MODEL_MAX_VOTES", ARENA_REWARD_MODEL_MAX_VOTES, 1, 10_000_000)
if ARENA_REWARD_MODEL:
    CELERY_BEAT_SCHEDULE = {**BEAT_SCHEDULE, **REWARD_MODEL_SCHEDULE}
# Limits of a submission: completions per group, characters of a completion and of the prompt
# (all its messages), bytes of one completion's meta (as compact JSON), and open (not yet
# judged) submissions per run. A request body over ARENA_ENV_MAX_BODY_BYTES is a 413 (Django
# refuses any body over DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB by default, so keep it below that).
ARENA_ENV_MAX_GROUP = env.int("ARENA_ENV_MAX_GROUP", default=16)
ARENA_ENV_MAX_COMPLETION_CHARS = env.int("ARENA_ENV_MAX_COMPLETION_CHARS", default=20000)
ARENA_ENV_MAX_PROMPT_CHARS = env.int("ARENA_ENV_MAX_PROMPT_CHARS", default=20000)
ARENA_ENV_MAX_META_BYTES = env.int("ARENA_ENV_MAX_META_BYTES", default=4096)
ARENA_ENV_MAX_PENDING_SUBMISSIONS = env.int("ARENA_ENV_MAX_PENDING_SUBMISSIONS", default=1000)
ARENA_ENV_MAX_BODY_BYTES = env.int("ARENA_ENV_MAX_BODY_BYTES", default=2_000_000)
# Requests per API token (django-ratelimit's rate syntax).
ARENA_ENV_RATE = env("ARENA_ENV_RATE", default="600/m")

# Runs per token: open at once, and created in any hour (0 turns either cap off); over either,
# creating a run is a 429 with Retry-After. Each run holds a hidden model and, with a webhook,
# deliveries: 50 open runs leave room for a sweep of experiments, and 60 an hour for a script
# that opens one a minute, while a loop that creates runs stops within the hour.
ARENA_ENV_MAX_OPEN_RUNS = env.int("ARENA_ENV_MAX_OPEN_RUNS", default=50)
ARENA_ENV_RUNS_PER_HOUR = env.int("ARENA_ENV_RUNS_PER_HOUR", default=60)
# A run's lease: a run its trainer has made no authenticated call on for this long is served to
# no visitor and is closed (reason "idle") by the periodic sweep, so a crashed trainer's run
# stops taking battles. 15 minutes outlasts a trainer's step between two reads of its rewards.
ARENA_ENV_RUN_IDLE_SECONDS = env.int("ARENA_ENV_RUN_IDLE_SECONDS", default=900)
# Webhooks (environment.outbound): https only unless ARENA_ENV_WEBHOOK_ALLOW_HTTP; never to a
# loopback, private, link-local or otherwise non-public address, except to the host names and
# networks (an address or CIDR, such as 10.0.0.0/8) listed in ARENA_ENV_WEBHOOK_ALLOW_HOSTS,
# for trainers inside the operator's network. Each POST gets ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS
# in all (connection, request and answer): 5 s is ample for a receiver that only stores the
# body, and a worker of the webhooks queue is held no longer by a host that never answers.
ARENA_ENV_WEBHOOK_ALLOW_HTTP = env.bool("ARENA_ENV_WEBHOOK_ALLOW_HTTP", default=False)
ARENA_ENV_WEBHOOK_ALLOW_HOSTS: list[str] = env.list("ARENA_ENV_WEBHOOK_ALLOW_HOSTS", default=[])
ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS = env_float("ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS", default=5.0)
# How long an environment battle served and not voted holds its pair (environment.serve): no other
# visitor is served that pair meanwhile, and its sides count as judged. A visitor votes on two
# finished answers within about this long or has left; 30 s frees an abandoned battle's pair
# before a trainer's group stalls, and a late vote still counts.
ARENA_ENV_BATTLE_HOLD_SECONDS = env.int("ARENA_ENV_BATTLE_HOLD_SECONDS", default=30)

_HOST_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?)+$")
_bounded("ARENA_ENV_MAX_OPEN_RUNS", ARENA_ENV_MAX_OPEN_RUNS, 0, 100_000)
_bounded("ARENA_ENV_RUNS_PER_HOUR", ARENA_ENV_RUNS_PER_HOUR, 0, 100_000)
_bounded("ARENA_ENV_RUN_IDLE_SECONDS", ARENA_ENV_RUN_IDLE_SECONDS, 60, 7 * 24 * 3600)
_bounded("ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS", ARENA_ENV_WEBHOOK_TIMEOUT_SECONDS, 0.5, 60)
_bounded("ARENA_ENV_BATTLE_HOLD_SECONDS", ARENA_ENV_BATTLE_HOLD_SECONDS, 1, 3600)
for _entry in ARENA_ENV_WEBHOOK_ALLOW_HOSTS:
    try:
        ipaddress.ip_network(_entry.strip(), strict=False)
    except ValueError:
        if not _HOST_NAME.match(_entry.strip().lower()):
            raise ImproperlyConfigured(
                f"ARENA_ENV_WEBHOOK_ALLOW_HOSTS holds {_entry!r}, which is neither a host name "
                "nor an address or network (such as 127.0.0.1/32 or 10.0.0.0/8)."
            ) from None
