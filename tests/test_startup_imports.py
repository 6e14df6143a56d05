"""What a process imports at start-up and while serving.

Each check runs in a fresh interpreter, since this test process has imported everything
already. The heavy libraries belong to the processes that use them: the rating fit (pandas,
pyarrow, scipy and statsmodels in a Celery worker or ``manage.py rate``), the live answers and
moderation (the openai client, on a web worker's first live answer), the style counts (the
tokenizer, when an answer is counted) and ``runserver``'s ASGI (daphne, not installed as an app:
uvicorn serves). Django's set-up, ``manage.py rate --help`` and a web worker's pages, pool battles,
votes and a signed-in visitor's own board import none of them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

BASE_DIR = Path(__file__).resolve().parent.parent

HEAVY = (
    "bpe_openai",
    "bpe_openai._bindings",
    "daphne",
    "numpy",
    "openai",
    "pandas",
    "pyarrow",
    "scipy",
    "statsmodels",
    "tiktoken",
)

#: Prints which of HEAVY the process has imported, as JSON, on the last line of stdout.
REPORT = f"import json, sys; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "DJANGO_SECRET_KEY": "x" * 50,
    "DJANGO_ALLOWED_HOSTS": "arena.example",
    # Read, never connected to: set-up and argument parsing open no connection.
    "DATABASE_URL": "postgres://arena@127.0.0.1:1/arena",
    "REDIS_URL": "redis://127.0.0.1:1/0",
}


def run_python(code: str, env: dict[str, str]) -> tuple[list[str], str]:
    """Run ``code`` (ending in ``REPORT``) in a fresh interpreter: the heavy modules it
    imported, and its standard output."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "CELERY_", "RATINGS_", "ARENA_"))
    }
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stdout


@pytest.mark.parametrize("settings_module", ["config.settings.production", "config.settings.local"])
def test_django_setup_imports_no_heavy_library(settings_module):
    env = {**PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": settings_module}
    assert run_python(f"import django; django.setup(); {REPORT}", env)[0] == []


def test_rate_help_imports_no_heavy_library_and_not_the_engine():
    code = (
        "import sys\n"
        "from django.core.management import execute_from_command_line\n"
        "try:\n"
        "    execute_from_command_line(['manage.py', 'rate', '--help'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "assert 'numpy' not in sys.modules and 'ratings.engine.api' not in sys.modules\n"
        f"{REPORT}"
    )
    heavy, output = run_python(code, PRODUCTION_ENV)
    assert "usage: manage.py rate" in output and "--no-style-control" in output
    assert heavy == []


def test_celery_worker_app_imports_no_heavy_library_before_a_task_runs():
    # What `celery -A config worker` loads before its first task: the app, Django's set-up and
    # every task module (autodiscovery).
    code = (
        "import django; django.setup()\n"
        "from config.celery_app import app\n"
        "app.loader.import_default_modules()\n"
        "assert 'ratings.tasks.snapshot_refresh' in app.tasks\n"
        f"{REPORT}"
    )
    assert run_python(code, PRODUCTION_ENV)[0] == []


def test_the_asgi_application_loads_the_style_tokenizer_and_not_bpe_openais_package():
    # With the server, not at the first answer's count; the extension only (answer_style.counts).
    code = (
        "import config.asgi\n"
        "from answer_style import counts\n"
        "assert counts._tokenizer.cache_info().currsize == 1\n"
        f"{REPORT}"
    )
    assert run_python(code, PRODUCTION_ENV)[0] == ["bpe_openai._bindings"]


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


SERVE = """
import json
import django
django.setup()
from django.test import Client
from arena.services.terms import terms_accept
from arena.api import VOTER_SESSION_KEY

client = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Test")
assert client.get("/").status_code == 200
terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
for page in ("/leaderboard", "/leaderboard?style=off", "/leaderboard.json", "/transparency"):
    assert client.get(page).status_code == 200, page
battle = client.post("/api/battles", data="{}", content_type="application/json")
assert battle.status_code == 201, battle.content
vote = client.post(
    f"/api/battles/{battle.json()['id']}/vote",
    data=json.dumps({"winner": "model_a"}),
    content_type="application/json",
)
assert vote.status_code == 201 and vote.json()["vote"] == {"winner": "model_a"}, vote.content
# A signed-in visitor's board (a fit) and data, from that vote.
from django.contrib.auth import get_user_model
from arena.models import Vote
account = get_user_model().objects.create_user(username="s@example.org", email="s@example.org")
Vote.objects.filter(battle_id=battle.json()["id"]).update(account=account)
client.force_login(account)
board = client.get("/account")
assert board.status_code == 200 and board.content.count(b"<tr data-model=") == 2, board.content
assert client.get("/account/data.json").status_code == 200
"""


@pytest.mark.django_db(transaction=True)
def test_a_web_worker_serves_pages_battles_and_votes_without_heavy_libraries(rated_models):
    from arena.tests.factories import CompletionFactory, PromptFactory
    from ratings import services

    # A pool prompt every model answered (a battle to start) and a snapshot to show.
    prompt = PromptFactory()
    for model in rated_models:
        CompletionFactory(prompt=prompt, model=model)
    assert services.snapshot_refresh().snapshot is not None
    env = {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": _database_url(),
        # As in production: a vote queues the refit for a Celery worker (here a broker nobody
        # reads) rather than fitting in the web process.
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "CELERY_BROKER_URL": "memory://",
    }
    # The tokenizer only: the style counts of the answers a web worker serves (each pool
    # answer's once per process when first drawn, arena.pool_cache: the pool's rows do not
    # store them; live and env answers' when saved). config.asgi loads it with the server. Its
    # Rust extension alone: the package's Python side holds every vocabulary in dicts
    # (answer_style.counts).
    assert run_python(SERVE + REPORT, env)[0] == ["bpe_openai._bindings"]


def _rate(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    battles = tmp_path / "battles.jsonl"
    rows = [("a", "b", "model_a"), ("b", "c", "model_a"), ("c", "a", "model_a")] * 3
    rows += [("b", "a", "model_a"), ("c", "b", "tie"), ("a", "c", "model_b")]
    battles.write_text(
        "".join(json.dumps({"model_a": a, "model_b": b, "winner": w}) + "\n" for a, b, w in rows)
    )
    return subprocess.run(
        [sys.executable, "-X", "importtime", *args, str(battles), "--no-style-control"],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.local"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def _imported(importtime: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in importtime.splitlines() if "|" in line}


def test_manage_rate_runs_the_engine_without_djangos_start_up(tmp_path):
    direct = _rate(["manage.py", "rate"], tmp_path)
    engine = _rate(["-m", "ratings.cli"], tmp_path)
    assert direct.stdout == engine.stdout and '"model": "a"' in direct.stdout
    assert "django" not in _imported(direct.stderr)
    assert "celery" not in _imported(direct.stderr)


def test_manage_rate_with_a_django_option_goes_through_django_with_the_same_result(tmp_path):
    through_django = _rate(["manage.py", "rate", "--settings", "config.settings.local"], tmp_path)
    engine = _rate(["-m", "ratings.cli"], tmp_path)
    assert through_django.stdout == engine.stdout
    assert "django.core.management" in _imported(through_django.stderr)


def test_manage_rate_with_djangos_attached_verbosity_goes_through_django(tmp_path):
    through_django = _rate(["manage.py", "rate", "-v2"], tmp_path)
    engine = _rate(["-m", "ratings.cli"], tmp_path)
    assert through_django.stdout == engine.stdout
    assert "django.core.management" in _imported(through_django.stderr)
