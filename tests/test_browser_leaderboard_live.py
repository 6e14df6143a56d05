"""End to end: the demo plus two live models with a few live votes.

The live models never met the demo's models, so the comparison graph is split. Through the real
page in Chromium: Overall still rates every demo model and lists the two live models under
"Needs more battles" (``not_connected``); and ``export_votes --format arena | rate -`` exits 0
with them provisional.
"""

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from playwright.sync_api import expect

from arena.models import ArenaModel, Battle, Vote
from arena.tests.fake_openai import FakeModel
from ratings import services
from tests.helpers import csp_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent
LIVE_VOTES = 3


def database_url() -> str:
    """The test database, as a URL a subprocess's settings can read."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def vote_live(page, text: str) -> None:
    page.get_by_test_id("prompt-input").fill(text)
    expect(page.get_by_test_id("prompt-input")).to_have_value(text)
    page.get_by_test_id("send").click()
    for side in "ab":
        expect(page.get_by_test_id(f"side-status-{side}")).to_have_text(re.compile(r"^Done"))
    expect(page.get_by_test_id("vote-a")).to_be_enabled()
    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A")


@pytest.fixture
def visitor_page(browser):
    """A page whose user agent is a visitor's: headless Chromium names itself "HeadlessChrome",
    which the arena flags as a bot, keeping its votes off the leaderboard."""
    probe = browser.new_page()
    user_agent = probe.evaluate("navigator.userAgent").replace("HeadlessChrome", "Chrome")
    probe.close()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, user_agent=user_agent)
    violations = csp_violations(context)
    yield context.new_page()
    context.close()
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)


def test_demo_plus_two_live_models_keeps_overall_rated_and_lists_the_live_ones(
    asgi_server, visitor_page, fake_upstream, live_models
):
    page = visitor_page
    call_command("load_demo", stdout=io.StringIO())
    # The demo's rated models: those its expert votes compared (the pool's other answerers have
    # no votes yet, so they are on no leaderboard, rated or provisional).
    demo_votes = Vote.objects.filter(battle__source=Battle.Source.IMPORT)
    demo_models = set(demo_votes.values_list("battle__model_a__slug", flat=True)) | set(
        demo_votes.values_list("battle__model_b__slug", flat=True)
    )
    fake_upstream.default = FakeModel(tokens=["A live ", "**answer**."], delay=0.005)

    page.goto(asgi_server.url + "/?mode=live")
    page.get_by_test_id("terms-accept").click()
    expect(page.locator("#terms")).to_be_hidden()  # recorded; the page is no longer inert
    page.wait_for_load_state("networkidle")
    for n in range(LIVE_VOTES):
        if n:
            page.get_by_test_id("new-battle").click()
        vote_live(page, f"Live question {n}?")
    live_votes = Vote.objects.filter(battle__source=Battle.Source.LIVE)
    assert live_votes.count() == LIVE_VOTES
    assert not live_votes.filter(flagged=True).exists()
    services.snapshot_refresh(force=True)

    page.goto(asgi_server.url + "/leaderboard?category=overall")
    overall = page.get_by_test_id("category-select").locator("option[value=overall]")
    assert "not enough votes" not in overall.inner_text()
    assert page.get_by_test_id("category-insufficient").count() == 0
    for style in ("on", "off"):
        page.goto(asgi_server.url + f"/leaderboard?category=overall&style={style}")
        rated = page.get_by_test_id("leaderboard-table").locator("tbody tr")
        shown = {rated.nth(i).get_attribute("data-model") for i in range(rated.count())}
        assert shown == demo_models
        provisional = page.get_by_test_id("provisional-table").locator("tbody tr")
        reasons = {
            provisional.nth(i).get_attribute("data-provisional"): provisional.nth(i).get_attribute(
                "data-reason"
            )
            for i in range(provisional.count())
        }
        assert reasons == {m.slug: "not_connected" for m in live_models}
        expect(page.get_by_test_id("provisional")).to_contain_text("Needs more battles")
        expect(page.get_by_test_id("provisional")).to_contain_text("Zephyrine Turbo 1")

    csv_text = page.request.get(asgi_server.url + "/leaderboard.csv?category=overall").text()
    assert csv_text.count(",provisional,") == 2 and csv_text.count(",rated,") == len(demo_models)

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url(),
    }
    manage = [sys.executable, str(ROOT / "manage.py")]
    export = subprocess.Popen(
        [*manage, "export_votes", "--format", "arena"], cwd=ROOT, env=env, stdout=subprocess.PIPE
    )
    rate = subprocess.run(
        [*manage, "rate", "-", "--format", "json"],
        cwd=ROOT,
        env=env,
        stdin=export.stdout,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert export.stdout is not None
    export.stdout.close()
    assert export.wait(timeout=60) == 0
    assert rate.returncode == 0, rate.stderr
    result = json.loads(rate.stdout)
    assert {m["model"] for m in result["models"]} == demo_models
    assert {(e["model"], e["reason"], e["battles"]) for e in result["provisional"]} == {
        (m.slug, "not_connected", LIVE_VOTES) for m in live_models
    }
    assert ArenaModel.objects.filter(slug__in=[m.slug for m in live_models]).count() == 2
