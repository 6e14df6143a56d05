"""In Chromium: one side's failure is shown at once while the other side still streams."""

import re

import pytest
from playwright.sync_api import expect

from arena.models import Battle
from arena.tests.fake_openai import FakeModel
from tests.test_browser_live import open_live_page, send_prompt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_side_that_fails_is_reported_while_the_other_still_streams(
    asgi_server, page, fake_upstream, live_models
):
    fake_upstream.models["upstream-quokka-1"] = FakeModel(fault="http_500")
    # Streams until stopped: the page is read while this side is still answering.
    fake_upstream.models["upstream-quokka-2"] = FakeModel(fault="endless", delay=0.05)
    open_live_page(page, asgi_server)
    send_prompt(page, "Hello")
    status = page.locator("#status")
    expect(status).to_contain_text("failed", use_inner_text=True)
    sides = {s: page.get_by_test_id(f"side-status-{s}").inner_text() for s in "ab"}
    failed = next(s for s, text in sides.items() if text.startswith("Failed"))
    other = "b" if failed == "a" else "a"
    text = status.inner_text()
    assert f"Model {failed.upper()} failed" in text and "server returned an error" in text
    assert f"Model {other.upper()} is still answering" in text
    assert "Both models are answering" not in text
    assert sides[other] == "Answering…"
    assert page.get_by_test_id("stop").is_enabled()  # the other side is still streaming
    assert Battle.objects.get().state == Battle.State.STREAMING

    page.get_by_test_id("stop").click()
    expect(page.get_by_test_id("regenerate")).to_be_enabled()
    expect(status).to_have_text(re.compile("cannot be voted on"), use_inner_text=True)
