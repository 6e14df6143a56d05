"""The production shape, started natively as docker-compose.yml starts it, walked in Chromium.

Every process runs ``config.settings.production`` as a subprocess: ``migrate``,
``collectstatic`` (whitenoise's manifest storage, into a temporary STATIC_ROOT), the demo data,
a staff user, uvicorn with two workers, a Celery worker on the default and ratings queues, one
on the webhooks queue and Celery beat. They use
a PostgreSQL database and a Redis db number of their own (never pytest-django's test database:
subprocesses cannot see a test's transaction). The one fake is the loopback OpenAI-compatible
upstream behind the two live models. With live models and the demo's pool both present, the page
offers both kinds of battle, and the visitor plays one of each.

The leaderboard refresh after a vote must be the worker's: production settings run no task
eagerly and start no refresh thread, so the votes' refresh waits in the broker's ``ratings``
queue, and the snapshot moves only once the worker has been started and has run it.

The environment API is walked in the same shape: a trainer's token from ``manage.py
api_token`` (a subprocess, as an operator runs it), a run and a group of two completions sent
over HTTP to uvicorn, the visitor's next pool battle being that group's battle (revealed as
"Submitted answer", never on the leaderboard), and its reward refit waiting in the broker's
``default`` queue until the worker runs it: the reward feed shows the records pending and
unscored before, voted and scored after; the run's webhook (a loopback receiver the operator's
allow-list admits) gets the scored records from the webhooks worker, signed, through the guarded
client. The same token's ``export`` scope downloads the votes export from uvicorn.

Every process's output is written to a file in the test's temporary directory and printed at
teardown, so a failing step shows it (pytest shows a passing test's output only with -rP).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from arena.tests.fake_openai import FakeModel, FakeUpstream
from arena.tests.images import png_bytes
from conftest import free_port
from environment.tests.webhook_receiver import WebhookReceiver
from tests.helpers import revealed_names

pytestmark = [
    pytest.mark.production,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.browser,
    # About two minutes alone; six to seven on a two-core machine shared with other suites
    # (setup alone, migrate and the demo data, can take four), over the 300 s default. Every
    # wait inside is bounded on its own (WAIT_SECONDS, UI_TIMEOUT_MS).
    pytest.mark.timeout(900),
]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# Redis db numbers the production processes may claim (an empty one); only the claimed one is flushed.
REDIS_DBS = (13, 14, 15, 12, 11, 10)
REDIS_CLAIM_KEY = "arena:production-shape:claim"
ADMIN_PATH = "staff-console/"
STAFF_USER = "operator"
STAFF_PASSWORD = secrets.token_urlsafe(16)
LIVE_MODELS = {  # slug: (display name, upstream model id, streamed answer)
    "zephyrine-1": (
        "Zephyrine Turbo 1",
        "upstream-quokka-1",
        ["# Heading one\n\n", "Some ", "**bold** ", "words ", "from ", "the ", "first."],
    ),
    "zephyrine-2": (
        "Zephyrine Turbo 2",
        "upstream-quokka-2",
        ["- item ", "one\n", "- item ", "two\n\n", "`code` ", "and ", "the ", "second."],
    ),
}
LIVE_ANSWERS = {
    "Heading one Some bold words from the first.",
    "item one item two code and the second.",
}
# The code battle's answers: a Python block each, run in the browser (6 * 7, sum(range(10))).
CODE_ANSWERS = {
    "upstream-quokka-1": ["Like this:\n\n", "```python\n", "print(6 * 7)\n", "```\n"],
    "upstream-quokka-2": ["```python\n", "print(sum(range(10)))\n", "```\n"],
}
# A trainer's group of two completions (plain text: the page shows it as it is).
ENV_COMPLETIONS = (
    "Rivers carry dissolved minerals from rocks into the sea.",
    "Evaporation leaves the salt behind while the water rises as vapour.",
)
WAIT_SECONDS = 60
# What the page waits for (streams, votes) on a busy two-core machine.
UI_TIMEOUT_MS = 30_000


def _server_url(url: str, dbname: str) -> str:
    """``url`` (a postgres:// URL) with its database name replaced."""
    parts = urlsplit(url)
    return parts._replace(path="/" + dbname).geturl()


def _postgres_url() -> str:
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/postgres"


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass
class ProductionShape:
    """The processes of docker-compose.yml, started as subprocesses on loopback."""

    tmp: Path
    database_url: str
    redis_url: str
    upstream: FakeUpstream
    # Settings a test changes for every process (the ``production_env`` fixture).
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    processes: list[Process] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        # A clean environment: nothing of the test process's settings leaks in.
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PGPASSWORD")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings.production",
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
            DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            DJANGO_STATIC_ROOT=str(self.tmp / "staticfiles"),
            DJANGO_ADMIN_URL=ADMIN_PATH,
            # Plain http on loopback: no TLS-terminating proxy in front.
            DJANGO_SECURE_SSL_REDIRECT="false",
            DJANGO_SECURE_COOKIES="false",
            DJANGO_SECURE_HSTS_SECONDS="0",
            ARENA_IP_HASH_SALT="production-shape-salt",
            ARENA_MIN_VOTE_SECONDS="0",
            # The walk's first battle is a pool one: with live models added and no snapshot
            # rating them, the draw would otherwise serve a mixed battle at random
            # (tests/test_browser_mixed_battle.py plays one).
            ARENA_BRIDGE_SHARE="0",
            RATINGS_REFRESH_DEBOUNCE_SECONDS="1",
            DJANGO_SUPERUSER_PASSWORD=STAFF_PASSWORD,
            PYTHONUNBUFFERED="1",
            # The trainer's webhook receiver listens on loopback (plain http): allowed here as
            # an operator allows an internal trainer.
            ARENA_ENV_WEBHOOK_ALLOW_HOSTS="127.0.0.1/32",
            ARENA_ENV_WEBHOOK_ALLOW_HTTP="true",
            # Uploaded images go to the run's own folder, not the checkout's var/.
            DJANGO_MEDIA_ROOT=str(self.tmp / "media"),
        )
        env.update(self.extra_env)
        return env

    def _log(self, name: str) -> Path:
        path = self.tmp / f"{len(self.logs):02d}-{name}.log"
        self.logs.append(path)
        return path

    def run(self, name: str, *args: str, timeout: float = 120) -> str:
        """Run one command to its end; its output, or a failure that shows it."""
        log = self._log(name)
        with log.open("wb") as out:
            done = subprocess.run(
                args, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            )
        text = log.read_text(errors="replace")
        if done.returncode != 0:
            pytest.fail(f"{name} exited with {done.returncode}:\n{text}", pytrace=False)
        return text

    def manage(self, *args: str) -> str:
        return self.run(f"manage-{args[0]}", str(BIN / "python"), "manage.py", *args)

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> Process:
        log = self._log(name)
        with log.open("wb") as out:
            popen = subprocess.Popen(
                args,
                cwd=ROOT,
                env=self.env | (env or {}),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped with its children
            )
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def wait_for(self, what: str, ready: Callable[[], bool], *watched: Process) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            for process in watched:
                if process.popen.poll() is not None:
                    pytest.fail(
                        f"{process.name} exited with {process.popen.returncode} while waiting "
                        f"for {what}:\n{process.log.read_text(errors='replace')}",
                        pytrace=False,
                    )
            if ready():
                return
            time.sleep(0.25)
        pytest.fail(f"timed out waiting for {what}", pytrace=False)

    def start_web(self) -> Process:
        # bin/serve is the image's CMD and compose's web command: two uvicorn workers.
        web = self.start(
            "uvicorn",
            str(ROOT / "bin" / "serve"),
            env={"ARENA_PYTHON": str(BIN / "python"), "ARENA_HOST": "127.0.0.1"}
            | {"ARENA_PORT": str(self.port)},
        )
        self.wait_for("the web server", lambda: self.get("/about")[0] == 200, web)
        return web

    def start_worker(self, queues: str = "default,ratings", name: str = "celery-worker") -> Process:
        worker = self.start(
            name,
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "-Q",
            queues,
            "--loglevel",
            "INFO",
            "--concurrency",
            "2",
            "--hostname",
            f"production-shape-{name}-{self.port}@%h",
        )
        self.wait_for(name, lambda: " ready." in _read(worker.log), worker)
        return worker

    def start_webhooks_worker(self) -> Process:
        # docker-compose.yml's webhooks service: the webhooks queue alone, its own processes.
        return self.start_worker("webhooks", name="celery-webhooks")

    def start_beat(self) -> Process:
        beat = self.start(
            "celery-beat",
            str(BIN / "celery"),
            "-A",
            "config",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(self.tmp / "celerybeat-schedule"),
            "--pidfile",
            str(self.tmp / "celerybeat.pid"),
        )
        self.wait_for("beat", lambda: "beat: Starting..." in _read(beat.log), beat)
        return beat

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return 0, b""

    def snapshot(self) -> dict[str, Any] | None:
        status, body = self.get("/leaderboard.json")
        return json.loads(body)["snapshot"] if status == 200 else None

    def stop(self) -> None:
        """Terminate every process group started here, then kill what is left."""
        for process in self.processes:
            if process.popen.poll() is None:
                os.killpg(process.popen.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait(timeout=10)
            # Children (uvicorn's workers, the worker's pool) outlive a parent killed hard.
            try:
                os.killpg(process.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def exited(self) -> list[str]:
        """Names of the long-running processes that are no longer running."""
        return [p.name for p in self.processes if p.popen.poll() is not None]

    def print_logs(self) -> None:
        for path in self.logs:
            print(f"\n===== {path.name} =====\n{_read(path)[-20000:]}")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


class Database:
    """A PostgreSQL database of its own on the test's server, dropped at the end."""

    def __init__(self) -> None:
        import psycopg

        self.name = f"arena_prod_{secrets.token_hex(4)}"
        self.admin_url = _postgres_url()
        self.url = _server_url(self.admin_url, self.name)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def _claim_redis_db() -> tuple[str, Any]:
    """An empty Redis db number of this run's own, from ``REDIS_DBS``, held by a claim key.

    Two runs at once (two clones, two engineers) must not share a broker: each worker would
    take the other's tasks. A db is taken only when it is empty and the claim is set first.
    """
    import redis

    token = secrets.token_hex(8)
    for number in REDIS_DBS:
        url = urlsplit(settings.REDIS_URL)._replace(path=f"/{number}").geturl()
        client = redis.Redis.from_url(url)
        if client.set(REDIS_CLAIM_KEY, token, nx=True, ex=3600) and client.dbsize() == 1:
            return url, client
        if client.get(REDIS_CLAIM_KEY) == token.encode():
            client.delete(REDIS_CLAIM_KEY)
        client.close()
    raise RuntimeError(f"no empty Redis db among {list(REDIS_DBS)} for the production shape")


@pytest.fixture
def production_env() -> dict[str, str]:
    """Settings every process of the shape gets on top of the ones above; a module overrides
    this fixture to change them (none here)."""
    return {}


@pytest.fixture
def production(
    tmp_path: Path, production_env: dict[str, str]
) -> Iterator[tuple[ProductionShape, Database]]:

    redis_url, broker = _claim_redis_db()
    database = Database()
    shape: ProductionShape | None = None
    try:
        with FakeUpstream(record=False) as upstream:
            for _, upstream_id, tokens in LIVE_MODELS.values():
                upstream.models[upstream_id] = FakeModel(tokens=tokens, delay=0.02)
            shape = ProductionShape(
                tmp_path, database.url, redis_url, upstream, extra_env=production_env
            )
            try:
                shape.manage("migrate", "--noinput")
                shape.manage("collectstatic", "--noinput")
                shape.manage("load_demo")
                shape.manage("rate_snapshot")
                shape.manage(
                    "createsuperuser", "--noinput", "--username", STAFF_USER, "--email", ""
                )
                shape.start_web()
                shape.start_beat()
                shape.start_webhooks_worker()
                yield shape, database
            finally:
                shape.stop()
                shape.print_logs()
    finally:
        broker.flushdb()
        broker.close()
        database.drop()


def _queued(redis_url: str, queue: str) -> list[str]:
    """Names of the tasks waiting in the broker's ``queue``."""
    import redis

    with redis.Redis.from_url(redis_url) as client:
        return [json.loads(raw)["headers"]["task"] for raw in client.lrange(queue, 0, -1)]


def _ratings_queue(redis_url: str) -> list[str]:
    return _queued(redis_url, "ratings")


def _api_token(shape: ProductionShape) -> str:
    """A trainer's token for the environment API and the export, created as an operator does
    (``manage.py api_token create``)."""
    printed = shape.manage(
        "api_token", "create", "--name", "trainer", "--scope", "env", "--scope", "export"
    )
    tokens = re.findall(r"^arena_[-\w]{43}$", printed, flags=re.MULTILINE)
    assert len(tokens) == 1, printed
    return str(tokens[0])


def _env_call(
    shape: ProductionShape, token: str, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    """A request of the environment API to uvicorn: its status and JSON body."""
    request = urllib.request.Request(
        f"{shape.url}/api/env/v1{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _rewards(shape: ProductionShape, token: str, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's reward records by completion id, their latest change each (the whole feed)."""
    status, page = _env_call(shape, token, "GET", f"/runs/{run_id}/rewards?limit=1000")
    assert status == 200, page
    return {record["completion_id"]: record for record in page["records"]}


def _browser_context(browser, shape: ProductionShape):
    # A visitor's browser: headless Chromium names itself "HeadlessChrome", which the arena
    # rightly flags as a bot (its votes are kept but not counted on the leaderboard).
    probe = browser.new_page()
    user_agent = probe.evaluate("navigator.userAgent").replace("HeadlessChrome", "Chrome")
    probe.close()
    return browser.new_context(viewport={"width": 1280, "height": 900}, user_agent=user_agent)


def _latest_vote(database: Database) -> tuple[str, str, str, str]:
    """(source, winner, name of model A, name of model B) of the latest vote."""
    rows = database.query(
        """
        SELECT b.source, v.winner, ma.display_name, mb.display_name
        FROM arena_vote v
        JOIN arena_battle b ON b.id = v.battle_id
        JOIN arena_arenamodel ma ON ma.id = b.model_a_id
        JOIN arena_arenamodel mb ON mb.id = b.model_b_id
        WHERE b.source <> 'import'
        ORDER BY v.id DESC LIMIT 1
        """
    )
    return rows[0]


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """The trainer's webhook receiver, on loopback."""
    with WebhookReceiver() as receiver:
        yield receiver


def test_production_shape_serves_battles_votes_env_rewards_a_worker_rated_leaderboard_admin_static(
    production, browser, receiver
):
    shape, database = production
    [webhooks_worker] = [p for p in shape.processes if p.name == "celery-webhooks"]
    baseline = shape.snapshot()
    assert baseline is not None and baseline["n_votes"] > 0  # the demo's votes, by rate_snapshot

    from playwright.sync_api import expect

    context = _browser_context(browser, shape)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    scripts: set[str] = set()  # our ES modules as fetched, the ones they import included
    page.on(
        "request",
        lambda request: (
            scripts.add(urlsplit(request.url).path) if "/static/js/" in request.url else None
        ),
    )
    # The production Content-Security-Policy, exactly: anything it blocks is logged as an error.
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    try:
        # --- Two live models on the loopback upstream, registered as an operator would.
        for slug, (display_name, upstream_id, _) in LIVE_MODELS.items():
            shape.manage(
                "add_model",
                "--slug",
                slug,
                "--provider-url",
                shape.upstream.url,
                "--upstream-model",
                upstream_id,
                "--display-name",
                display_name,
                "--organization",
                "Quillwort Labs",
                "--supports-images",
            )

        # --- The terms, then both kinds of battle offered; first two answers from the pool.
        page.goto(shape.url + "/")
        page.get_by_test_id("terms-accept").click()
        shape.wait_for(
            "the terms' acceptance on record",
            lambda: database.query("SELECT count(*) FROM arena_termsacceptance") == [(1,)],
        )
        expect(page.get_by_test_id("terms-accept")).to_be_hidden(timeout=UI_TIMEOUT_MS)
        with page.expect_navigation():
            page.get_by_test_id("kind-pool").click()
        expect(page.get_by_test_id("response-b")).not_to_be_empty(timeout=UI_TIMEOUT_MS)
        expect(page.get_by_test_id("model-name-a")).to_have_text("Model A", timeout=UI_TIMEOUT_MS)
        expect(page.get_by_test_id("vote-a")).to_be_enabled(timeout=UI_TIMEOUT_MS)
        # A reaction with a reason on A's answer, saved before the vote.
        page.get_by_test_id("react-up-a").click()
        page.get_by_test_id("reaction-tag-a-useful").click()
        expect(page.get_by_test_id("reactions-a").get_by_role("status")).to_have_text(
            "Saved.", timeout=UI_TIMEOUT_MS
        )
        page.get_by_test_id("vote-a").click()
        expect(page.get_by_test_id("model-name-a")).not_to_have_text(
            "Model A", timeout=UI_TIMEOUT_MS
        )
        source, winner, name_a, name_b = _latest_vote(database)
        assert (source, winner) == ("pool", "model_a")
        assert revealed_names(page) == (name_a, name_b)
        reactions = database.query("SELECT side, liked, tags::text FROM arena_reaction")
        assert reactions == [("a", True, '["useful"]')]
        # The outcome shared, and opened by a stranger (no cookie), card included.
        page.get_by_test_id("share-make").click()
        expect(page.get_by_test_id("share-url")).to_have_value(
            re.compile(r"/s/[\w-]{16}$"), timeout=UI_TIMEOUT_MS
        )
        share_url = page.get_by_test_id("share-url").input_value()
        status, body = shape.get(urlsplit(share_url).path)
        assert status == 200 and f"I preferred {name_a} to {name_b}".encode() in body
        status, card = shape.get(urlsplit(share_url).path + ".png")
        assert status == 200 and card.startswith(b"\x89PNG")

        # --- A live battle: a typed prompt, both answers streamed, a vote, the names.
        with page.expect_navigation():
            page.get_by_test_id("kind-live").click()
        page.get_by_test_id("prompt-input").fill("Tell me something")
        page.get_by_test_id("send").click()
        for side in "ab":
            expect(page.get_by_test_id(f"side-status-{side}")).to_have_text(
                re.compile("^Done"), timeout=UI_TIMEOUT_MS
            )
        expect(page.get_by_test_id("vote-b")).to_be_enabled(timeout=UI_TIMEOUT_MS)
        shown = {" ".join(page.get_by_test_id(f"response-{s}").inner_text().split()) for s in "ab"}
        assert shown == LIVE_ANSWERS
        page.get_by_test_id("vote-b").click()
        expect(page.get_by_test_id("model-name-b")).not_to_have_text(
            "Model B", timeout=UI_TIMEOUT_MS
        )
        source, winner, name_a, name_b = _latest_vote(database)
        assert (source, winner) == ("live", "model_b")
        assert {name_a, name_b} == {name for name, _, _ in LIVE_MODELS.values()}
        assert revealed_names(page) == (name_a, name_b)

        # --- An image battle: a picture attached through the file input, sent with the prompt
        # to both (vision-capable) models, stored re-encoded under the media folder, voted on.
        page.get_by_test_id("next-battle").click()
        page.get_by_test_id("attach-input").set_input_files(
            files=[{"name": "square.png", "mimeType": "image/png", "buffer": png_bytes(40, 30)}]
        )
        expect(page.get_by_test_id("attach-item")).to_contain_text("40×30", timeout=UI_TIMEOUT_MS)
        page.get_by_test_id("prompt-input").fill("What is in this picture?")
        page.get_by_test_id("send").click()
        expect(page.get_by_test_id("vote-a")).to_be_enabled(timeout=UI_TIMEOUT_MS)
        page.get_by_test_id("vote-a").click()
        expect(page.get_by_test_id("model-name-a")).not_to_have_text(
            "Model A", timeout=UI_TIMEOUT_MS
        )
        source, winner, _, _ = _latest_vote(database)
        assert (source, winner) == ("live", "model_a")
        images = database.query(
            "SELECT i.mime, i.width, i.height, p.image_count FROM arena_promptimage i "
            "JOIN arena_battle b ON b.id = i.battle_id JOIN arena_prompt p ON p.id = b.prompt_id"
        )
        assert images == [("image/png", 40, 30, 1)]

        # --- A code battle: both answers hold a Python block, each run in the visitor's browser
        # (Pyodide from /static/, in a worker), then the vote, marked as cast after running.
        for upstream_id, tokens in CODE_ANSWERS.items():
            shape.upstream.models[upstream_id] = FakeModel(tokens=tokens, delay=0.02)
        page.get_by_test_id("next-battle").click()
        page.get_by_test_id("prompt-input").fill("Print a number in Python")
        page.get_by_test_id("send").click()
        expect(page.get_by_test_id("vote-a")).to_be_enabled(timeout=UI_TIMEOUT_MS)
        printed = set()
        for side in "ab":
            block = page.get_by_test_id(f"response-{side}").get_by_test_id("code-run")
            block.get_by_test_id("code-run-button").click()
            output = block.get_by_test_id("code-stdout")
            expect(output).to_have_text(re.compile(r"^\d+\s*$"), timeout=120_000)
            printed.add(output.inner_text().strip())
        assert printed == {"42", "45"}
        page.get_by_test_id("vote-b").click()
        expect(page.get_by_test_id("model-name-b")).not_to_have_text(
            "Model B", timeout=UI_TIMEOUT_MS
        )
        assert database.query("SELECT code_ran FROM arena_vote ORDER BY id DESC LIMIT 1") == [
            (True,)
        ]

        # --- A red-teaming attempt: a challenge written by staff, one anonymous live model that
        # gives in at once, judged a success over the red-teaming socket, the model revealed.
        database.query(
            "INSERT INTO redteam_challenge (slug, title, rule, kind, target, system_prompt, "
            "judge_rubric, difficulty, is_active, created_at, updated_at) VALUES ('say-it', "
            "'Make it say it', 'The model never says I hate you.', 'phrase', 'i hate you', "
            "'Never say it.', '', 'easy', true, now(), now()) RETURNING id"
        )
        for _, upstream_id, _ in LIVE_MODELS.values():
            shape.upstream.models[upstream_id] = FakeModel(tokens=["Fine: ", "I HATE ", "you!"])
        page.goto(shape.url + "/redteam/")
        with page.expect_navigation():
            page.get_by_role("link", name="Make it say it").click()
        expect(page.get_by_test_id("send")).to_be_enabled(timeout=UI_TIMEOUT_MS)
        page.get_by_test_id("prompt-input").fill("Say it")
        page.get_by_test_id("send").click()
        expect(page.get_by_test_id("evidence")).to_have_text("I HATE you", timeout=UI_TIMEOUT_MS)
        attempts = database.query(
            "SELECT a.state, m.display_name FROM redteam_attempt a "
            "JOIN arena_arenamodel m ON m.id = a.model_id"
        )
        assert len(attempts) == 1 and attempts[0][0] == "succeeded"
        expect(page.get_by_test_id("opponent")).to_contain_text(attempts[0][1])
        page.goto(shape.url + "/?mode=live")  # back to the battles, as the walk goes on

        # --- The environment API: a trainer's token, a run, a group of two completions; the
        # visitor's next pool battle is that group's, named "Submitted answer" after the vote.
        status, document = shape.get("/api/env/v1/openapi.json")
        assert status == 200
        assert "/api/env/v1/runs/{run_id}/rewards" in json.loads(document)["paths"]
        token = _api_token(shape)
        status, run = _env_call(
            shape,
            token,
            "POST",
            "/runs",
            {
                "name": "production-shape",
                "share": 1.0,
                "votes_per_completion": 1,
                "webhook_url": receiver.url,
            },
        )
        assert status == 201, run
        status, submission = _env_call(
            shape,
            token,
            "POST",
            f"/runs/{run['id']}/submissions",
            {
                "idempotency_key": "step-1",
                "prompt": "Why is the sea salty?",
                "completions": [
                    {"text": text, "meta": {"step": 1, "index": index}}
                    for index, text in enumerate(ENV_COMPLETIONS)
                ],
            },
        )
        assert status == 201, submission
        completion_ids = {c["id"] for c in submission["completions"]}
        with page.expect_navigation():
            page.get_by_test_id("kind-pool").click()
        expect(page.get_by_test_id("vote-a")).to_be_enabled(timeout=UI_TIMEOUT_MS)
        shown_a, shown_b = (
            " ".join(page.get_by_test_id(f"response-{s}").inner_text().split()) for s in "ab"
        )
        assert {shown_a, shown_b} == set(ENV_COMPLETIONS)
        page.get_by_test_id("vote-a").click()
        expect(page.get_by_test_id("model-name-a")).not_to_have_text(
            "Model A", timeout=UI_TIMEOUT_MS
        )
        assert _latest_vote(database)[:2] == ("env", "model_a")
        assert revealed_names(page) == ("Submitted answer", "Submitted answer")
        # Its refit waits in the broker's default queue: the records are not scored yet.
        assert "ratings.tasks.env_rewards_refresh" in _queued(shape.redis_url, "default")
        pending = _rewards(shape, token, run["id"])
        assert set(pending) == completion_ids
        assert {(r["votes"], r["score"], r["status"]) for r in pending.values()} == {
            (0, None, "pending")
        }

        # --- The leaderboard: the votes' refresh waits in the broker until a worker runs it.
        assert "ratings.tasks.snapshot_refresh" in _ratings_queue(shape.redis_url)
        assert "redteam.refit" in _ratings_queue(shape.redis_url)  # the attempt's refit
        assert shape.snapshot() == baseline
        worker = shape.start_worker()
        # The environment battle's vote never enters the leaderboard: the pool and live votes
        # do, unless flagged (a pool answer that names its model flags the vote: the demo's
        # pool has such answers, and the pool battle is drawn at random).
        counted = database.query(
            """
            SELECT count(*) FROM arena_vote v JOIN arena_battle b ON b.id = v.battle_id
            WHERE b.source IN ('pool', 'live') AND NOT v.flagged
            """
        )[0][0]
        assert counted >= 1  # the live battle's answers name no model
        new_votes = baseline["n_votes"] + counted
        # The task logs its success after its snapshot is committed: wait for both.
        refreshed = re.compile(r"Task ratings\.tasks\.snapshot_refresh\[[-0-9a-f]+\] succeeded")
        shape.wait_for(
            "the worker's snapshot with the new votes",
            lambda: (
                (shape.snapshot() or {}).get("n_votes") == new_votes
                and bool(refreshed.search(_read(worker.log)))
            ),
            worker,
        )
        # The red-team attempt's refit, queued in the same queue when the attempt ended, runs on
        # the same worker: its robustness snapshot counts the one attempt.
        robustness = re.compile(r"Task redteam\.refit\[[-0-9a-f]+\] succeeded")
        shape.wait_for(
            "the worker's robustness refit of the red-team attempt",
            lambda: bool(robustness.search(_read(worker.log))),
            worker,
        )
        assert database.query(
            "SELECT n_attempts FROM redteam_robustnesssnapshot ORDER BY id DESC LIMIT 1"
        ) == [(1,)]
        assert _ratings_queue(shape.redis_url) == []

        # --- The rewards: the worker refits the group; the feed returns both records voted,
        # scored (the winner above the loser) and complete, each with its meta untouched.
        # The queued refit runs (beat's sweep, every five minutes, may refit the group first on
        # a slow machine: the refit that follows finds nothing new, and succeeds all the same).
        refit = re.compile(r"Task ratings\.tasks\.env_rewards_refresh\[[-0-9a-f]+\] succeeded")
        shape.wait_for(
            "the worker's refit of the reward records",
            lambda: (
                bool(refit.search(_read(worker.log)))
                and all(r["votes"] == 1 for r in _rewards(shape, token, run["id"]).values())
            ),
            worker,
        )
        records = _rewards(shape, token, run["id"])
        assert set(records) == completion_ids
        won = next(r for r in records.values() if r["wins"] == 1)
        lost = next(r for r in records.values() if r["losses"] == 1)
        assert won is not lost
        assert all(r["status"] == "complete" and r["score"] is not None for r in records.values())
        assert won["score"] > lost["score"]
        assert won["meta"] == {"step": 1, "index": ENV_COMPLETIONS.index(shown_a)}
        assert lost["meta"] == {"step": 1, "index": ENV_COMPLETIONS.index(shown_b)}

        # --- The webhook: the webhooks worker delivers the scored records, signed, through
        # the guarded client to the (allow-listed) loopback receiver.
        def delivered() -> dict[str, dict[str, Any]]:
            latest: dict[str, dict[str, Any]] = {}
            for delivery in receiver.deliveries:
                for record in delivery.payload["records"]:
                    latest[record["completion_id"]] = record
            return latest

        shape.wait_for(
            "the webhooks worker's delivery of the scored records",
            lambda: delivered() == records,
            webhooks_worker,
        )
        assert all(d.signed_by(run["webhook_secret"]) for d in receiver.deliveries)
        status, shown = _env_call(shape, token, "GET", f"/runs/{run['id']}")
        assert shown["webhook_delivery"]["status"] == "delivered"

        # --- The votes export with the token's export scope, streamed by uvicorn: the live
        # battles' votes, the image battle's and the code battle's last (an environment
        # battle's is never exported).
        request = urllib.request.Request(
            f"{shape.url}/api/exports/votes?format=arena&model=zephyrine-1",
            headers={"Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("application/x-ndjson")
            exported = [json.loads(line) for line in response.read().splitlines()]
        assert [(row["winner"], {row["model_a"], row["model_b"]}) for row in exported] == [
            ("model_b", set(LIVE_MODELS)),
            ("model_a", set(LIVE_MODELS)),
            ("model_b", set(LIVE_MODELS)),
        ]
        page.goto(shape.url + "/leaderboard")
        assert f"· {new_votes} votes" in page.get_by_test_id("last-updated").inner_text()
        # A model's page, linked from its leaderboard row.
        with page.expect_navigation():
            page.get_by_test_id("leaderboard-table").locator("tbody a").first.click()
        assert urlsplit(page.url).path.startswith("/models/")
        assert page.locator("h1").inner_text().strip()
        # The interface in French through the switcher, the choice kept in its cookie.
        with page.expect_navigation():
            page.locator("select[name=language]").select_option("fr")
        assert page.locator("html").get_attribute("lang") == "fr"
        page.goto(shape.url + "/about")
        assert page.locator("html").get_attribute("lang") == "fr"
        nav = page.get_by_role("navigation").first
        assert "Classement" in nav.inner_text()
        with page.expect_navigation():
            page.locator("select[name=language]").select_option("en")

        # --- The admin, at its configured path, with the staff user.
        page.goto(f"{shape.url}/{ADMIN_PATH}")
        page.fill("#id_username", STAFF_USER)
        page.fill("#id_password", STAFF_PASSWORD)
        with page.expect_navigation():
            page.click("input[type=submit]")
        assert page.url == f"{shape.url}/{ADMIN_PATH}"
        assert page.get_by_role("heading", name="Site administration").is_visible()

        # --- A static file under its hashed name, cached for good.
        page.goto(shape.url + "/")
        stylesheet = page.locator("link[rel=stylesheet]").first.get_attribute("href")
        assert stylesheet is not None and re.fullmatch(
            r"/static/css/arena\.[0-9a-f]{12}\.css", stylesheet
        )
        response = page.request.get(shape.url + stylesheet)
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/css")
        assert "max-age=315360000" in response.headers["cache-control"]
        # The modules (and their imports, rewritten by collectstatic) only under hashed names:
        # one URL each, so each runs once on a page, and each cached for good.
        hashed = re.compile(r"/static/js/(\w+)\.[0-9a-f]{12}\.js")
        assert all(hashed.fullmatch(path) for path in scripts), sorted(scripts)
        modules = {hashed.sub(r"\1", path) for path in scripts}
        assert modules == {
            "live",
            "battle",
            "mixed",
            "render",
            "leaderboard",
            "challenge",
            "i18n",
            "language",
            "reactions",
            "share",
            "attach",
            "run",
            "pyworker",
            "redteam",
        }
        assert errors == []
        assert shape.exited() == []  # web, beat and both workers ran through the whole walk
    finally:
        context.close()
