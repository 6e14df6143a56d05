"""The frame code answers run in: its own strict policy, framed only by this site."""

import pytest

pytestmark = pytest.mark.django_db


def test_the_run_frame_allows_inline_code_and_nothing_from_the_network(client):
    response = client.get("/run/frame")
    assert response.status_code == 200
    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert policy == {
        "default-src": "'none'",
        "script-src": "'unsafe-inline'",
        "style-src": "'unsafe-inline'",
        "img-src": "data:",
        "base-uri": "'none'",
        "form-action": "'none'",
        "frame-ancestors": "'self'",
    }
    assert response["X-Frame-Options"] == "SAMEORIGIN"


def test_the_battle_page_keeps_its_own_policy_and_refuses_framing(client):
    response = client.get("/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response["X-Frame-Options"] == "DENY"


def test_the_battle_page_passes_the_code_run_limit(client, settings):
    settings.ARENA_CODE_RUN_SECONDS = 3.5
    assert 'data-code-run-seconds="3.5"' in client.get("/").content.decode()
