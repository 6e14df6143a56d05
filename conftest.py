"""Shared fixtures: service requirements, an ASGI server on loopback, a headless browser.

Tests marked ``postgres``, ``redis`` or ``browser`` skip with the reason when the service is
missing; with ARENA_REQUIRE_SERVICES=1 / ARENA_REQUIRE_BROWSER=1 (as in CI) they fail instead.
Tests marked ``reward_model`` need the reward-model extra (torch, sentence-transformers, the
bundled MiniLM) and skip with the reason without it; ARENA_REQUIRE_REWARD_MODEL=1 makes them
fail instead (the extra's CI job).
Tests marked ``trainers`` need the trainers' virtualenv (``make install-trainers``); they fail
without it under ARENA_REQUIRE_TRAINERS=1 or ARENA_REQUIRE_SERVICES=1.
Tests marked ``multihost`` need root and ``ip netns`` (tests/multihost.py); they skip with the
reason without them, and fail instead under ARENA_REQUIRE_SERVICES=1.
"""

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

REQUIRE_SERVICES = os.environ.get("ARENA_REQUIRE_SERVICES") == "1"
REQUIRE_BROWSER = os.environ.get("ARENA_REQUIRE_BROWSER") == "1"
REQUIRE_REWARD_MODEL = os.environ.get("ARENA_REQUIRE_REWARD_MODEL") == "1"
REQUIRE_TRAINERS = REQUIRE_SERVICES or os.environ.get("ARENA_REQUIRE_TRAINERS") == "1"
# The trainers' virtualenv (Makefile's TRAINERS_VENV): TRL, verifiers and Atropos.
TRAINERS_PYTHON = Path(__file__).resolve().parent / ".venv-trainers" / "bin" / "python"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _postgres_missing() -> str | None:
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        return "needs PostgreSQL: set DATABASE_URL=postgres://..."
    return None


def _redis_missing() -> str | None:
    if not settings.REDIS_URL:
        return "needs Redis: set REDIS_URL=redis://..."
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        return f"needs Redis at {settings.REDIS_URL}: {exc}"
    return None


def _reward_model_missing() -> str | None:
    from ratings.reward_model.embedding import unavailable_reason

    reason = unavailable_reason()
    return f"needs the reward-model extra: {reason}" if reason else None


def _browser_missing() -> str | None:
    if not CHROMIUM.exists():
        return "needs Chromium at /usr/bin/chromium (apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "needs the playwright package"
    return None


def _trainers_missing() -> str | None:
    if not TRAINERS_PYTHON.exists():
        return f"needs the trainers' virtualenv at {TRAINERS_PYTHON.parent.parent} (make install-trainers)"
    return None


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Each test starts with an empty cache: rate-limit counters, the circuit breaker and the
    refresh debounce live there, and a rerun within the same minute would otherwise meet the
    previous run's counters."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _default_language() -> Iterator[None]:
    """Each test starts in the default language: LocaleMiddleware activates a request's
    language in the test client's thread and leaves it there, so a French request would word
    the messages of the next test's direct service calls in French."""
    from django.utils import translation

    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guarded client resolves host names through a stub, for webhooks
    (``environment.outbound``) and pool images (``arena.outbound``): only ``localhost``
    resolves, so no test sends a DNS query off the machine; a test that needs a name gives its
    own resolver."""
    from arena import outbound as guard
    from environment import outbound
    from environment.tests.outbound_helpers import StubResolver

    stub = StubResolver({"localhost": ["127.0.0.1", "::1"]})
    monkeypatch.setattr(outbound, "resolve_host", stub)
    monkeypatch.setattr(guard, "resolve_host", stub)


def _multihost_missing() -> str | None:
    from tests.multihost import unavailable

    return unavailable()


def pytest_runtest_setup(item: pytest.Item) -> None:
    checks = [
        ("postgres", _postgres_missing, REQUIRE_SERVICES),
        ("redis", _redis_missing, REQUIRE_SERVICES),
        ("browser", _browser_missing, REQUIRE_BROWSER),
        ("reward_model", _reward_model_missing, REQUIRE_REWARD_MODEL),
        ("trainers", _trainers_missing, REQUIRE_TRAINERS),
        ("multihost", _multihost_missing, REQUIRE_SERVICES),
    ]
    for marker, missing, required in checks:
        if item.get_closest_marker(marker) is None:
            continue
        reason = missing()
        if reason is None:
            continue
        if required:
            pytest.fail(f"{reason} (required here: ARENA_REQUIRE_*=1)", pytrace=False)
        pytest.skip(reason)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests run last, after every other test (the order is otherwise kept): once the
    session's browser has started, Playwright's event loop is running in this thread for the
    rest of the session (see ``_browser_tests_may_call_the_orm``)."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """``DJANGO_ALLOW_ASYNC_UNSAFE`` for browser tests only, from their setup (the database
    marker's fixtures included) to their teardown (the session's, for the last one)."""
    if item.get_closest_marker("browser") is None:
        return (yield)
    with _browser_tests_may_call_the_orm():
        return (yield)


@contextlib.contextmanager
def _browser_tests_may_call_the_orm() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running in the test thread while the browser
    lives, which Django takes for an async context and refuses ORM calls in. A browser test and
    its fixtures are plain synchronous code, so the guard is lifted for those tests alone; every
    other test (consumers included) runs with it on, before the browser starts."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AsgiServer:
    """The project's ASGI application served by uvicorn in a thread, on a loopback port."""

    def __init__(self) -> None:
        import uvicorn

        from config.asgi import application

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            ws="websockets-sansio",
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        from arena.live.upstream import close_clients

        try:
            await self.server.serve()
        finally:
            await close_clients()

    def __enter__(self) -> "AsgiServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("ASGI test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def asgi_server(transactional_db: None, settings) -> Iterator[AsgiServer]:
    settings.ALLOWED_HOSTS = ["*"]
    with AsgiServer() as server:
        yield server


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    reason = _browser_missing()
    if reason:
        if REQUIRE_BROWSER:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    # Waits as long as Playwright's own actions do (30 s), not expect's 5 s: a page on this
    # loaded machine (two cores, the server, Chromium and the upstream in one process tree)
    # can take seconds to get a frame through.
    expect.set_options(timeout=30_000)
    # Its event loop runs in this thread from here to the end of the session: browser tests run
    # last, with Django's async guard lifted (pytest_runtest_protocol above).
    with sync_playwright() as pw:
        instance = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield instance
        instance.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A fresh page in its own context; the test fails if the page met any violation of the
    Content-Security-Policy (the test settings serve production's policy, exactly)."""
    from tests.helpers import csp_violations

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    violations = csp_violations(context)
    page = context.new_page()
    yield page
    context.close()
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)


@pytest.fixture(params=["desktop", "phone"])
def sized_page(request, browser) -> Iterator[object]:
    """A fresh page at a desktop's size, then at a phone's with touch (``tests.helpers.SIZES``);
    ``page.size_name`` says which. As ``page``, it fails a test that met a CSP violation."""
    from tests.helpers import SIZES, csp_violations

    context = browser.new_context(**SIZES[request.param])
    violations = csp_violations(context)
    page = context.new_page()
    page.size_name = request.param
    yield page
    context.close()
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)


# --- Live battles -----------------------------------------------------------------------------
@pytest.fixture
def media_root(settings, tmp_path):
    """Stored files (prompt images) go to this test's own directory."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


@pytest.fixture
def fake_upstream() -> Iterator[object]:
    """A real OpenAI-compatible server on loopback; set ``.models[name] = FakeModel(...)``."""
    from arena.tests.fake_openai import FakeUpstream

    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
def live_models(fake_upstream):
    """Two active live models served by the fake upstream, with distinctive names."""
    from arena.models import ArenaModel, Provider

    provider = Provider.objects.create(
        name="loopback", base_url=fake_upstream.url, read_timeout=5.0, max_retries=0
    )
    return [
        ArenaModel.objects.create(
            slug=f"zephyrine-{n}",
            display_name=f"Zephyrine Turbo {n}",
            organization="Quillwort Labs",
            provider=provider,
            upstream_model_id=f"upstream-quokka-{n}",
        )
        for n in (1, 2)
    ]


# --- Ratings: votes to rate -------------------------------------------------------------------
# Here rather than in one app's conftest: arena/tests (exports, the add-model command, hostile
# API input), ratings/tests and tests/ (CSP, schemathesis, browser leaderboards) all use them.


@pytest.fixture
def make_vote(db):
    """Record a finished battle and its vote, the way the arena stores them.

    ``make_vote(model_a, model_b, winner, turns=1, prompt="...", category=..., language=...,
    mode="anonymous", flagged=False, answers=("a text", "b text"), images=0, code_ran=False)``;
    ``images`` is how many images the prompt had (``Prompt.image_count``).
    """
    from answer_style import conv_metadata, style_counts
    from arena.models import Battle, BattleMessage, Vote
    from arena.tests.factories import PromptFactory

    counter = {"n": 0}

    def make(
        model_a,
        model_b,
        winner="model_a",
        *,
        turns=1,
        prompt=None,
        category="writing",
        language="en",
        mode="anonymous",
        flagged=False,
        answers=("# Answer\n\n- one\n- two\n\n**yes**", "A plain answer."),
        images=0,
        code_ran=False,
    ):
        counter["n"] += 1
        text = prompt or f"Question {counter['n']}?"
        prompt_obj = PromptFactory(
            turns=[text] + [f"Follow-up {t}" for t in range(1, turns)],
            category=category,
            language=language,
            image_count=images,
        )
        battle = Battle.objects.create(
            mode=mode,
            source=Battle.Source.POOL,
            model_a=model_a,
            model_b=model_b,
            prompt=prompt_obj,
            session_hash="",
            state=Battle.State.VOTED,
        )
        for turn in range(turns):
            for side, answer in zip(("a", "b"), answers, strict=True):
                BattleMessage.objects.create(
                    battle=battle,
                    side=side,
                    turn=turn,
                    user_content=prompt_obj.turns[turn],
                    content=answer,
                )
        return Vote.objects.create(
            battle=battle,
            winner=winner,
            voter_id=f"voter-{counter['n']}",
            flagged=flagged,
            flags=["too_fast"] if flagged else [],
            code_ran=code_ran,
            style=conv_metadata(
                [style_counts(answers[0])] * turns, [style_counts(answers[1])] * turns
            ),
        )

    return make


@pytest.fixture
def rated_models(db, make_vote):
    """Three public models and 60 anonymous votes where A > B > C most of the time, with varied
    answer styles; returns the models strongest first."""
    import random

    from arena.tests.factories import ArenaModelFactory

    rng = random.Random(7)
    models = [
        ArenaModelFactory(slug=slug, display_name=name, organization=org)
        for slug, name, org in (
            ("alpha", "Alpha Large", "Org A"),
            ("beta", "Beta Medium", "Org B"),
            ("gamma", "Gamma Small", "Org C"),
        )
    ]
    styles = [
        ("# Title\n\n- a\n- b\n\n**bold** text " * 2, "Short."),
        ("Plain and long answer " * 20, "**Bold** short"),
        ("1. one\n2. two", "## Header\n\nSome words here"),
    ]
    strength = {"alpha": 4.0, "beta": 1.5, "gamma": 0.0}
    for i in range(60):
        a, b = rng.sample(models, 2)
        p_a = 1 / (1 + 10 ** ((strength[b.slug] - strength[a.slug]) / 2))
        roll = rng.random()
        winner = "model_a" if roll < p_a * 0.9 else ("tie" if roll < p_a * 0.9 + 0.1 else "model_b")
        make_vote(a, b, winner, answers=styles[i % len(styles)])
    return models
