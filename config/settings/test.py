"""Test settings: the local defaults, with PostgreSQL and Redis when the environment names them."""

from .base import *  # noqa: F403
from .base import DATABASES, VAR_DIR

DEBUG = False
SECRET_KEY = "test-key-not-secret"  # noqa: S105
ALLOWED_HOSTS = ["*"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Rate limits are exercised by their own test, which turns them back on.
RATELIMIT_ENABLE = False
ARENA_IP_HASH_SALT = "test-salt"

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so that a live server thread and the test share one database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
ARENA_MIN_VOTE_SECONDS = 0.0
# Tests observe the after-vote refresh as it happens, inside the request, not in a thread.
RATINGS_EAGER_REFRESH_IN_BACKGROUND = False
