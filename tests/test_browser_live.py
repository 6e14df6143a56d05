"""End to end in Chromium: live battles streamed from the loopback fake upstream."""

import re
import time

import pytest
from playwright.sync_api import expect

from arena.models import Battle, BattleMessage, Vote
from arena.tests.fake_openai import FakeModel
from tests.helpers import assert_names_revealed
from tests.test_browser_pool_battle import XSS_PAYLOADS, record_bodies

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ANSWER_1 = ["# Heading one\n\n", "Some ", "**bold** ", "words ", "from ", "the ", "first."]
ANSWER_2 = ["- item ", "one\n", "- item ", "two\n\n", "`code` ", "and ", "the ", "second."]


def record_frames(page) -> list[str]:
    frames: list[str] = []

    def on_socket(ws):
        ws.on("framereceived", lambda payload: frames.append(str(payload)))
        ws.on("framesent", lambda payload: frames.append(str(payload)))

    page.on("websocket", on_socket)
    return frames


def open_live_page(page, server):
    page.goto(server.url + "/")
    page.get_by_test_id("terms-accept").click()
    # The terms close once the server has recorded them; until then the dialog is modal and the
    # page behind it inert: text typed there is lost (a busy machine answers slowly).
    expect(page.locator("#terms")).to_be_hidden()
    page.wait_for_selector("[data-testid=prompt-input]")


def send_prompt(page, text):
    page.get_by_test_id("prompt-input").fill(text)
    expect(page.get_by_test_id("prompt-input")).to_have_value(text)
    page.get_by_test_id("send").click()


def wait_both_done(page):
    """Both sides report done and the saved battle has unlocked voting."""
    done = re.compile(r"^Done")
    for side in "ab":
        expect(page.get_by_test_id(f"side-status-{side}")).to_have_text(done, use_inner_text=True)
    expect(page.get_by_test_id("vote-a")).to_be_enabled()
    for side in "ab":  # all three at once
        assert page.get_by_test_id(f"side-status-{side}").inner_text().startswith("Done")


def test_visitor_streams_two_answers_follows_up_votes_and_sees_the_names(
    asgi_server, page, fake_upstream, live_models
):
    fake_upstream.models["upstream-quokka-1"] = FakeModel(tokens=ANSWER_1, delay=0.03)
    fake_upstream.models["upstream-quokka-2"] = FakeModel(tokens=ANSWER_2, delay=0.03)
    frames = record_frames(page)
    bodies = record_bodies(page)
    open_live_page(page, asgi_server)
    send_prompt(page, "Tell me something")
    wait_both_done(page)
    assert page.get_by_test_id("prompt").inner_text().strip() == "Tell me something"
    shown = {" ".join(page.get_by_test_id(f"response-{s}").inner_text().split()) for s in "ab"}
    assert shown == {
        "Heading one Some bold words from the first.",
        "item one item two code and the second.",
    }
    assert page.locator("[data-testid=response-a] h1, [data-testid=response-b] h1").count() == 1
    assert not page.get_by_test_id("vote-a").is_disabled()

    send_prompt(page, "And a follow-up")
    expect(page.get_by_test_id("response-b").locator(".turn")).to_have_count(2)
    wait_both_done(page)

    sent_before_vote = "\n".join(frames + bodies)
    for model in live_models:
        for identity in (model.slug, model.display_name, model.upstream_model_id, "Quillwort"):
            assert identity not in sent_before_vote
    assert page.get_by_test_id("model-name-a").inner_text() == "Model A"

    page.get_by_test_id("vote-b").click()
    expect(page.get_by_test_id("model-name-b")).not_to_have_text("Model B", use_inner_text=True)
    vote = Vote.objects.select_related("battle__model_a", "battle__model_b").get()
    assert vote.winner == "model_b" and vote.battle.source == Battle.Source.LIVE
    assert vote.battle.prompt.turns == ["Tell me something", "And a follow-up"]
    assert_names_revealed(page, vote.battle)
    assert page.get_by_test_id("regenerate").is_disabled()

    # "Next battle" (its key, N) starts a new live battle on the same page.
    page.keyboard.press("n")
    expect(page.locator("#status")).to_have_text("New battle: type a prompt.")
    expect(page.get_by_test_id("model-name-b")).to_have_text("Model B", use_inner_text=True)
    assert page.get_by_test_id("response-a").inner_text().strip() == ""
    assert page.get_by_test_id("next-battle").is_hidden()
    assert page.get_by_test_id("send").inner_text() == "Send"
    assert Vote.objects.count() == 1


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_streamed_model_text_never_runs_as_html_or_script(
    asgi_server, page, fake_upstream, live_models
):
    payload = "\n\n".join(XSS_PAYLOADS)
    # Small chunks, so that half-written tags and links pass through the renderer too.
    fake_upstream.default = FakeModel(tokens=chunked(payload, 7), delay=0.002)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_live_page(page, asgi_server)
    send_prompt(page, "Show me some HTML.")
    wait_both_done(page)
    page.get_by_test_id("response-a").get_by_text("click").first.click()
    page.get_by_test_id("response-b").get_by_text("link").first.click()
    page.wait_for_timeout(300)
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert dialogs == []
    dangerous = page.evaluate(
        """() => {
          const bad = [];
          document.querySelectorAll('[data-testid^=response-] *').forEach((el) => {
            if (['SCRIPT', 'IFRAME', 'OBJECT', 'EMBED', 'SVG'].includes(el.tagName.toUpperCase())) bad.push(el.tagName);
            for (const attr of el.attributes) {
              if (attr.name.startsWith('on')) bad.push(el.tagName + ' ' + attr.name);
              if (/^\\s*javascript:/i.test(attr.value)) bad.push(el.tagName + ' ' + attr.name);
            }
          });
          return bad;
        }"""
    )
    assert dangerous == []
    assert "window.__xss=8" in page.get_by_test_id("response-a").inner_text()


def test_a_failing_model_leaves_a_clear_unvotable_battle_and_a_way_out(
    asgi_server, page, fake_upstream, live_models
):
    fake_upstream.models["upstream-quokka-1"] = FakeModel(fault="http_500")
    open_live_page(page, asgi_server)
    send_prompt(page, "Hello")
    expect(page.get_by_test_id("regenerate")).to_be_enabled()
    status = page.locator("#status").inner_text()
    assert "cannot be voted on" in status
    failed = [page.get_by_test_id(f"side-status-{s}").inner_text() for s in "ab"]
    assert any("server returned an error" in text for text in failed)
    assert page.get_by_test_id("vote-a").is_disabled()
    assert Battle.objects.get().state == Battle.State.ERRORED

    fake_upstream.models.clear()
    page.get_by_test_id("new-battle").click()
    send_prompt(page, "Try again")
    wait_both_done(page)
    assert not page.get_by_test_id("vote-a").is_disabled()


def test_stop_ends_both_streams_and_closing_the_page_closes_the_upstream(
    asgi_server, page, fake_upstream, live_models
):
    fake_upstream.default = FakeModel(fault="endless", delay=0.02)
    open_live_page(page, asgi_server)
    send_prompt(page, "Never stop")
    expect(page.get_by_test_id("response-a")).to_contain_text("tok3", use_inner_text=True)
    page.get_by_test_id("stop").click()
    expect(page.get_by_test_id("regenerate")).to_be_enabled()
    for side in "ab":
        assert page.get_by_test_id(f"side-status-{side}").inner_text().startswith("Stopped")
    assert "cannot be voted on" in page.locator("#status").inner_text()
    assert page.get_by_test_id("vote-a").is_disabled()
    for name in ("upstream-quokka-1", "upstream-quokka-2"):
        assert fake_upstream.wait_closed(name).disconnected

    page.get_by_test_id("regenerate").click()
    # Streaming again, and the new answers are under way.
    expect(page.get_by_test_id("stop")).to_be_enabled()
    expect(page.get_by_test_id("response-b")).to_contain_text("tok3", use_inner_text=True)
    assert page.get_by_test_id("stop").is_enabled()
    page.close()  # the visitor leaves mid-stream
    for name in ("upstream-quokka-1", "upstream-quokka-2"):
        request = fake_upstream.wait_closed(name)
        assert request.disconnected and len(fake_upstream.requests_for(name)) == 2
    battle = Battle.objects.get()
    deadline = time.monotonic() + 10
    while battle.state == Battle.State.STREAMING and time.monotonic() < deadline:
        time.sleep(0.05)  # the server saves the aborted turn just after the socket closes
        battle.refresh_from_db()
    assert battle.state == Battle.State.ABORTED
    assert set(BattleMessage.objects.filter(battle=battle).values_list("status", flat=True)) == {
        "aborted"
    }


def test_new_battle_while_streaming_leaves_the_old_battle_behind(
    asgi_server, page, fake_upstream, live_models
):
    fake_upstream.default = FakeModel(tokens=40, delay=0.05)
    frames = record_frames(page)
    open_live_page(page, asgi_server)
    send_prompt(page, "A long answer, please")
    expect(page.get_by_test_id("response-a")).to_contain_text("tok3", use_inner_text=True)
    page.get_by_test_id("new-battle").click()
    # The server stops the old turn and reports its end; the page must not take it back.
    deadline = time.monotonic() + 10
    while not any('"turn_end"' in f for f in frames) and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert any('"turn_end"' in f for f in frames)
    page.wait_for_timeout(200)
    assert page.get_by_test_id("response-a").inner_text().strip() == ""
    assert page.get_by_test_id("regenerate").is_disabled()
    assert page.get_by_test_id("vote-a").is_disabled()
    assert page.get_by_test_id("send").inner_text() == "Send"  # not a follow-up to the old one
    assert Battle.objects.get().state == Battle.State.ABORTED
