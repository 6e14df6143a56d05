"""Content-Security-Policy: every page carries it, and no template needs an exemption from it."""

import re
from pathlib import Path

import pytest
from django.test import Client

from config.settings import base
from ratings import services

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_DIRS = [ROOT / "templates", *ROOT.glob("*/templates")]

SCRIPT_TAG = re.compile(r"<script\b[^>]*>", re.IGNORECASE)
STYLE_ELEMENT = re.compile(r"<style\b", re.IGNORECASE)
STYLE_ATTRIBUTE = re.compile(r"\sstyle\s*=", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)


def inline_code(html: str) -> list[str]:
    """What the policy (script-src/style-src 'self') would block in this markup."""
    found = [tag for tag in SCRIPT_TAG.findall(html) if "src=" not in tag]
    for pattern in (STYLE_ELEMENT, STYLE_ATTRIBUTE, EVENT_HANDLER):
        found += pattern.findall(html)
    return found


def directives(response) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";") if part.strip())


# The frame code answers run in is the one page whose own policy allows inline script (and
# nothing from the network): arena.views.RUN_FRAME_CSP, checked in arena/tests/test_run_frame.py.
RUN_FRAME = ROOT / "templates" / "arena" / "run_frame.html"


def test_templates_have_no_inline_script_style_or_event_handler():
    templates = [p for d in TEMPLATE_DIRS for p in d.rglob("*.html") if p != RUN_FRAME]
    assert len(templates) > 5 and RUN_FRAME.exists()
    for path in templates:
        assert inline_code(path.read_text()) == [], path


@pytest.fixture
def served_policy(settings):
    """The policy every environment serves (the test settings serve it too; set here explicitly)."""
    settings.CONTENT_SECURITY_POLICY = base.CONTENT_SECURITY_POLICY


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/leaderboard", "/about", "/admin/login/", "/no-such-page"])
def test_pages_answer_with_the_policy(path, settings, served_policy):
    path = path.replace("/admin/", f"/{settings.ADMIN_URL}")
    response = Client().get(path)
    assert response.status_code in (200, 404)
    policy = directives(response)
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self'" and policy["img-src"] == "'self' data:"
    assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"
    assert policy["base-uri"] == "'self'" and policy["form-action"] == "'self'"
    assert inline_code(response.content.decode()) == []


def test_leaderboard_with_its_charts_renders_nothing_inline(rated_models, settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    services.snapshot_refresh()
    html = Client().get("/leaderboard").content.decode()
    assert html.count("<svg") >= 4
    assert inline_code(html) == []
