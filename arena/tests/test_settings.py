import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks

BASE_DIR = Path(__file__).resolve().parents[2]


# What production's settings require, all set.
REQUIRED_ENV = {
    "DJANGO_SECRET_KEY": "x" * 50,
    "DJANGO_ALLOWED_HOSTS": "arena.example",
    "DATABASE_URL": "postgres://u@db:5432/arena",
    "REDIS_URL": "redis://r:6379/0",
}


def import_production_settings(code: str = "import config.settings.production", **env):
    """Run ``code`` in a fresh interpreter with only ``env`` of the settings' variables set."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))
    }
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_settings_refuse_to_start_naming_everything_missing():
    result = import_production_settings()
    assert result.returncode != 0
    for name in ["DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL"]:
        assert name in result.stderr


def test_production_settings_refuse_sqlite():
    result = import_production_settings(
        **{**REQUIRED_ENV, "DATABASE_URL": "sqlite:////tmp/x.sqlite3"}
    )
    assert (
        result.returncode != 0
        and "DATABASE_URL" in result.stderr
        and "REDIS_URL" not in result.stderr
    )


def test_production_settings_load_with_everything_set():
    result = import_production_settings(**REQUIRED_ENV)
    assert result.returncode == 0, result.stderr


def production_databases(**env) -> dict:
    """Production's DATABASES (JSON) with everything required set, plus ``env``."""
    result = import_production_settings(
        "import json, config.settings.production as p; print(json.dumps(p.DATABASES))",
        **{**REQUIRED_ENV, **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["default"]


def test_production_pools_database_connections_sized_from_the_environment():
    assert production_databases()["OPTIONS"]["pool"] == {
        "min_size": 1,
        "max_size": 8,
        "timeout": 10.0,
    }
    database = production_databases(
        DATABASE_POOL_MAX_SIZE="3", DATABASE_POOL_MIN_SIZE="5", DATABASE_POOL_TIMEOUT_SECONDS="2.5"
    )
    # The minimum never exceeds the maximum (psycopg's pool would refuse to open).
    assert database["OPTIONS"]["pool"] == {"min_size": 3, "max_size": 3, "timeout": 2.5}
    assert database["CONN_MAX_AGE"] == 0


def test_production_without_a_pool_keeps_connections_as_configured():
    database = production_databases(DATABASE_POOL_MAX_SIZE="0", DATABASE_CONN_MAX_AGE="60")
    assert "pool" not in database.get("OPTIONS", {})
    assert database["CONN_MAX_AGE"] == 60


def test_production_refuses_kept_connections_with_the_pool():
    result = import_production_settings(**REQUIRED_ENV, DATABASE_CONN_MAX_AGE="60")
    assert result.returncode != 0
    assert "DATABASE_CONN_MAX_AGE must be 0 while the connection pool is on" in result.stderr


@pytest.mark.parametrize(
    ("override", "check_id"),
    [
        (
            {"CHANNEL_LAYERS": {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}},
            "arena.E001",
        ),
        (
            {
                "CACHES": {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
                "RATELIMIT_ENABLE": True,
            },
            "arena.E002",
        ),
        ({"DEBUG": True}, "arena.E003"),
        ({"CELERY_TASK_ALWAYS_EAGER": True}, "arena.E004"),
    ],
)
def test_system_checks_refuse_unsafe_production_combinations(settings, override, check_id):
    settings.ARENA_PRODUCTION = True
    settings.DEBUG = False
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.RATELIMIT_ENABLE = False
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer"}}
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://x",
        }
    }
    assert not [e for e in run_checks() if e.id.startswith("arena.")]
    for key, value in override.items():
        setattr(settings, key, value)
    assert check_id in {e.id for e in run_checks()}


def test_local_defaults_need_no_services(settings):
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings.local'; django.setup();"
                "from django.conf import settings as s;"
                "print(s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'],"
                " s.CACHES['default']['BACKEND'], s.CELERY_TASK_ALWAYS_EAGER)"
            ),
        ],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.sqlite3",
        "channels.layers.InMemoryChannelLayer",
        "django.core.cache.backends.locmem.LocMemCache",
        "True",
    ]


def production_origin(**env) -> subprocess.CompletedProcess:
    return import_production_settings(
        "import config.settings.production as p; print(p.ARENA_PUBLIC_ORIGIN)",
        **{**REQUIRED_ENV, **env},
    )


@pytest.mark.parametrize(
    ("env", "origin"),
    [
        ({}, "https://arena.example"),
        ({"DJANGO_SECURE_SSL_REDIRECT": "false"}, "http://arena.example"),
        (
            {"DJANGO_CSRF_TRUSTED_ORIGINS": "https://Proxy.example:8443"},
            "https://proxy.example:8443",
        ),
        (
            {
                "ARENA_PUBLIC_ORIGIN": "https://arena.example.org/",
                "DJANGO_CSRF_TRUSTED_ORIGINS": "",
            },
            "https://arena.example.org",
        ),
    ],
    ids=["allowed-host", "plain-http", "trusted-origin", "set"],
)
def test_production_links_on_the_set_or_derived_public_origin(env, origin):
    result = production_origin(**env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == origin


@pytest.mark.parametrize(
    "env",
    [
        {"DJANGO_ALLOWED_HOSTS": ".example.org"},
        {"DJANGO_ALLOWED_HOSTS": "*"},
        {"ARENA_PUBLIC_ORIGIN": "arena.example.org"},
        {"ARENA_PUBLIC_ORIGIN": "https://arena.example.org/battles"},
    ],
    ids=["wildcard-host", "any-host", "no-scheme", "a-path"],
)
def test_production_refuses_to_start_without_a_public_origin(env):
    result = production_origin(**env)
    assert result.returncode != 0 and "ARENA_PUBLIC_ORIGIN" in result.stderr
