"""In Chromium: a turn whose end cannot be saved (the database away) can be regenerated at once."""

import pytest
from django.db import OperationalError
from playwright.sync_api import expect

from arena.models import BattleMessage
from arena.tests.fake_openai import FakeModel
from tests.test_browser_live import open_live_page, send_prompt, wait_both_done

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_after_turn_lost_the_page_offers_regenerate_and_the_lost_answers_are_kept(
    asgi_server, page, fake_upstream, live_models, monkeypatch
):
    from arena.live import consumer, runtime

    real_finish, database = runtime.turn_finish, {"up": False}

    def finish(*args):
        if not database["up"]:
            raise OperationalError("the database is away")
        return real_finish(*args)

    monkeypatch.setattr(runtime, "turn_finish", finish)
    monkeypatch.setattr(consumer, "_FINISH_RETRY_SECONDS", 0.01)
    monkeypatch.setattr(runtime, "_SAVE_RETRY_FIRST_SECONDS", 60.0)  # the page acts first
    fake_upstream.models["upstream-quokka-1"] = FakeModel(tokens=["Kept ", "one."])
    fake_upstream.models["upstream-quokka-2"] = FakeModel(tokens=["Kept ", "two."])
    open_live_page(page, asgi_server)
    send_prompt(page, "Hello")
    status = page.locator("#status")
    expect(status).to_contain_text("could not be saved yet", use_inner_text=True)
    expect(page.get_by_test_id("regenerate")).to_be_enabled()
    assert "could not be saved yet" in status.inner_text()  # both at once
    assert page.get_by_test_id("vote-a").is_disabled()

    database["up"] = True
    fake_upstream.models.clear()
    page.get_by_test_id("regenerate").click()
    wait_both_done(page)
    assert not page.get_by_test_id("vote-a").is_disabled()
    kept = BattleMessage.objects.filter(superseded_at__isnull=False)
    assert sorted(kept.values_list("content", flat=True)) == ["Kept one.", "Kept two."]
