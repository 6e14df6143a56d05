"""Running ``manage.py`` as a real subprocess against the test database.

The subprocess sees what the test committed, so tests that use it need ``transactional_db``.
"""

import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def current_database_url() -> str:
    """The URL of the database this test runs against (the test database, not the main one)."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] or ""
    if db["PASSWORD"]:
        auth += f":{db['PASSWORD']}"
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def manage_env() -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": current_database_url(),
        "PYTHONUNBUFFERED": "",
    }


def manage_argv(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def manage(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``manage.py args...`` with stdout and stderr captured as text; never raises on failure."""
    return subprocess.run(
        manage_argv(*args),
        cwd=ROOT,
        env=manage_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The command failed with exactly one line on stderr, holding each expected text."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def settings_start_refusal(name: str, value: str) -> str:
    """Django started in a subprocess with the setting ``name`` at ``value``: the start must
    fail with ``ImproperlyConfigured`` naming the setting; returns its stderr."""
    out = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test", name: value},
        check=False,
    )
    assert out.returncode != 0, out.stdout
    assert "ImproperlyConfigured" in out.stderr and name in out.stderr, out.stderr
    return out.stderr
