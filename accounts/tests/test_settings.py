"""The accounts' settings: the sign-in providers named in the environment, the mail server,
and what production's checks say of them. Each case runs in a fresh interpreter, as settings
are read once per process."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": "arena.example.org",
    "DATABASE_URL": "postgres://arena@db.invalid:5432/arena",
    "REDIS_URL": "redis://redis.invalid:6379/0",
}
SHOW = (
    "import django; django.setup(); from django.conf import settings; "
    "print([a for a in settings.INSTALLED_APPS if '.providers.' in a]); "
    "print(settings.EMAIL_BACKEND, settings.EMAIL_HOST, settings.EMAIL_PORT, "
    "settings.EMAIL_USE_TLS, settings.DEFAULT_FROM_EMAIL)"
)


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "ARENA_", "EMAIL_"))
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=BASE_DIR,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings.local", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_by_default_no_provider_is_installed_and_mail_is_printed():
    result = run(["-c", SHOW])
    assert result.returncode == 0, result.stderr
    providers, mail = result.stdout.splitlines()
    assert providers == "[]"
    assert mail.startswith("django.core.mail.backends.console.EmailBackend")


def test_the_named_providers_are_installed_and_their_sign_in_routes_exist():
    code = SHOW + "; from django.urls import reverse; print(reverse('github_login'))"
    result = run(["-c", code], ARENA_SOCIAL_PROVIDERS="github, Google")
    assert result.returncode == 0, result.stderr
    providers, _, login = result.stdout.splitlines()
    assert providers == (
        "['allauth.socialaccount.providers.github', 'allauth.socialaccount.providers.google']"
    )
    assert login == "/account/github/login/"


def test_empty_variables_as_compose_passes_them_take_the_defaults():
    result = run(
        ["-c", SHOW], EMAIL_URL="", DJANGO_DEFAULT_FROM_EMAIL="", ARENA_SOCIAL_PROVIDERS=""
    )
    assert result.returncode == 0, result.stderr
    providers, mail = result.stdout.splitlines()
    assert providers == "[]"
    assert mail.startswith("django.core.mail.backends.console.EmailBackend")
    assert mail.endswith("Arena <arena@localhost>")


def test_a_provider_allauth_does_not_have_stops_the_start_naming_it():
    result = run(["-c", SHOW], ARENA_SOCIAL_PROVIDERS="github,myspace")
    assert result.returncode != 0
    assert "ARENA_SOCIAL_PROVIDERS holds 'myspace'" in result.stderr


def test_an_smtp_url_configures_the_mail_server():
    result = run(
        ["-c", SHOW],
        EMAIL_URL="smtp+tls://arena%40example.org:secret@smtp.example.org:587",
        DJANGO_DEFAULT_FROM_EMAIL="Arena <arena@example.org>",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        "django.core.mail.backends.smtp.EmailBackend smtp.example.org 587 True "
        "Arena <arena@example.org>"
    )


def test_production_without_a_mail_server_passes_check_deploy_and_says_codes_are_printed():
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "accounts.I001" in result.stdout + result.stderr


def test_production_with_a_mail_server_has_nothing_to_say_of_it():
    result = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        **PRODUCTION_ENV,
        EMAIL_URL="smtp+tls://user:secret@smtp.example.org:587",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "accounts.I001" not in result.stdout + result.stderr
