"""End to end in Chromium: a live battle's vote goes over its open socket (a ``vote`` frame
answered by ``voted``), its refusals reach the page's vote handling as the HTTP vote's do, and
a closed socket leaves the vote to HTTP."""

import json

import pytest
from django.contrib.sessions.backends.db import SessionStore
from playwright.sync_api import expect

from arena.models import Battle, TermsAcceptance, Vote
from arena.services.vote_guards import CHALLENGE_SESSION_KEY
from tests.test_browser_live import open_live_page, send_prompt, wait_both_done

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def record_traffic(page) -> dict[str, list]:
    """The page's HTTP requests (method, path under /api/) and its socket frames, parsed."""
    traffic: dict[str, list] = {"requests": [], "sent": [], "received": []}
    page.on(
        "request",
        lambda r: (
            traffic["requests"].append((r.method, r.url.split("/api/", 1)[-1]))
            if "/api/" in r.url
            else None
        ),
    )

    def on_socket(ws):
        ws.on("framesent", lambda payload: traffic["sent"].append(json.loads(payload)))
        ws.on("framereceived", lambda payload: traffic["received"].append(json.loads(payload)))

    page.on("websocket", on_socket)
    return traffic


def vote_requests(traffic) -> list:
    return [r for r in traffic["requests"] if r[1].endswith("/vote")]


def kinds(frames: list[dict]) -> list[str]:
    return [f["type"] for f in frames if f["type"] in ("vote", "voted", "error")]


def page_session(page) -> SessionStore:
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "sessionid"]
    return SessionStore(cookie["value"])


def test_the_live_vote_goes_over_the_socket_after_the_challenge_and_reveals_the_names(
    asgi_server, page, settings, fake_upstream, live_models
):
    settings.ARENA_CHALLENGE = True
    settings.ARENA_CHALLENGE_MAX_NUMBER = 2000
    traffic = record_traffic(page)
    open_live_page(page, asgi_server)
    send_prompt(page, "Tell me something")
    wait_both_done(page)
    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A", use_inner_text=True)
    expect(page.locator("#verdict")).to_contain_text("Thanks for voting!")
    vote = Vote.objects.select_related("battle").get()
    assert vote.winner == "model_a" and vote.battle.source == Battle.Source.LIVE
    assert ("POST", "challenge/verify") in traffic["requests"]
    assert vote_requests(traffic) == []  # no HTTP vote: the socket carried it
    assert kinds(traffic["sent"]) == ["vote"]
    assert kinds(traffic["received"]) == ["voted"]
    assert traffic["sent"][-1]["battle_id"] == str(vote.battle_id)
    assert page.get_by_test_id("regenerate").is_disabled()


def test_a_challenge_refused_over_the_socket_is_solved_again_and_the_vote_retried(
    asgi_server, page, settings, fake_upstream, live_models
):
    settings.ARENA_CHALLENGE = True
    settings.ARENA_CHALLENGE_MAX_NUMBER = 2000
    traffic = record_traffic(page)
    with page.expect_response(lambda r: r.url.endswith("/api/challenge/verify")):
        open_live_page(page, asgi_server)
    send_prompt(page, "Tell me something")
    wait_both_done(page)
    session = page_session(page)  # the session forgets its solved challenge
    assert session.get(CHALLENGE_SESSION_KEY)
    del session[CHALLENGE_SESSION_KEY]
    session.save()
    page.get_by_test_id("vote-b").click()
    expect(page.get_by_test_id("model-name-b")).not_to_have_text("Model B", use_inner_text=True)
    assert Vote.objects.get().winner == "model_b"
    assert traffic["requests"].count(("POST", "challenge/verify")) == 2
    assert vote_requests(traffic) == []
    assert kinds(traffic["sent"]) == ["vote", "vote"]
    refused, voted = [f for f in traffic["received"] if f["type"] in ("voted", "error")]
    assert refused["code"] == "challenge_required" and refused["reply_to"] == "vote"
    assert voted["type"] == "voted"


def test_terms_refused_over_the_socket_show_the_terms_again_at_the_next_vote(
    asgi_server, page, fake_upstream, live_models
):
    traffic = record_traffic(page)
    open_live_page(page, asgi_server)
    send_prompt(page, "Tell me something")
    wait_both_done(page)
    TermsAcceptance.objects.all().delete()  # e.g. new terms meanwhile
    page.get_by_test_id("vote-a").click()
    expect(page.locator("#status")).to_have_text("Accept the terms before voting.")
    assert not Vote.objects.exists()
    assert page.locator("#terms").is_hidden()
    expect(page.get_by_test_id("vote-a")).to_be_enabled()  # the vote can be cast again
    page.get_by_test_id("vote-a").click()
    expect(page.locator("#terms")).to_be_visible()  # the page asks first, as after an HTTP 403
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A", use_inner_text=True)
    assert Vote.objects.get().winner == "model_a"
    assert vote_requests(traffic) == []
    assert kinds(traffic["received"]) == ["error", "voted"]


def test_with_the_socket_closed_the_live_vote_goes_over_http(
    asgi_server, page, settings, fake_upstream, live_models
):
    settings.ARENA_WS_IDLE_SECONDS = 1.0
    traffic = record_traffic(page)
    sockets = []
    page.on("websocket", lambda ws: sockets.append(ws))
    open_live_page(page, asgi_server)
    send_prompt(page, "Tell me something")
    wait_both_done(page)
    if not sockets[-1].is_closed():
        sockets[-1].wait_for_event("close")  # idle for a second: the server closes it
    page.get_by_test_id("vote-b").click()
    expect(page.get_by_test_id("model-name-b")).not_to_have_text("Model B", use_inner_text=True)
    assert Vote.objects.get().winner == "model_b"
    assert len(vote_requests(traffic)) == 1
    assert kinds(traffic["sent"]) == []
