"""`manage.py check --deploy` is clean with production settings and their documented defaults."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_production(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "ARENA_"))
    }
    clean.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="arena.example.org",
        DATABASE_URL="postgres://arena@db.invalid:5432/arena",
        REDIS_URL="redis://redis.invalid:6379/0",
        **env,
    )
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_passes_at_warning_level_with_the_defaults():
    result = run_production("manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


def test_turning_the_https_switches_off_is_reported_by_check_deploy():
    result = run_production(
        "manage.py",
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_SECURE_SSL_REDIRECT="false",
        DJANGO_SECURE_HSTS_SECONDS="0",
        DJANGO_SECURE_COOKIES="false",
    )
    assert result.returncode != 0
    for check_id in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check_id in result.stderr


def test_production_defaults_are_https_hsts_and_secure_cookies():
    code = (
        "from django.conf import settings as s; "
        "print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD, s.DEBUG)"
    )
    result = run_production("-c", f"import django; django.setup(); {code}")
    assert result.stdout.split() == ["True", "31536000", "True", "True", "False", "False", "False"]
