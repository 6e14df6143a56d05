"""In Chromium: with live models and a pool both present, a visitor rates two stored answers
and asks two live models; the terms are accepted only from their "I agree" button."""

import pytest
from playwright.sync_api import expect

from arena.models import ArenaModel, Battle, TermsAcceptance, Vote
from arena.tests.factories import CompletionFactory, PromptFactory
from arena.tests.fake_openai import FakeModel
from tests.helpers import assert_names_revealed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def pool_models() -> list[ArenaModel]:
    """Two pool-only models (an imported pool, say) that answered the same two prompts."""
    models = [
        ArenaModel.objects.create(slug=f"imported-{n}", display_name=f"Imported Model {n}")
        for n in (1, 2)
    ]
    for q in (1, 2):
        prompt = PromptFactory(turns=[f"Pool question {q}?"], source="import:pool.jsonl")
        for model in models:
            CompletionFactory(prompt=prompt, model=model, turns=[f"{model.slug} answers {q}."])
    return models


def wait_names_revealed(page, side="a"):
    expect(page.get_by_test_id(f"model-name-{side}")).not_to_have_text(f"Model {side.upper()}")


def test_with_both_kinds_a_visitor_rates_pool_answers_then_switches_to_live(
    asgi_server, page, fake_upstream, live_models, settings
):
    # The pool tab's battle is a stored pair here; with live models not yet rated the draw
    # would serve a mixed battle at random (tests/test_browser_mixed_battle.py plays one).
    settings.ARENA_BRIDGE_SHARE = 0.0
    pool_models()
    fake_upstream.default = FakeModel(tokens=["A live ", "answer."], delay=0.01)
    page.goto(asgi_server.url + "/?mode=pool")
    page.get_by_test_id("terms-accept").click()
    # Recorded once the dialog closes; until then the keys below go to the dialog, not the page.
    expect(page.locator("#terms")).to_be_hidden()
    expect(page.get_by_test_id("response-b")).to_contain_text("answers")
    assert page.get_by_test_id("kind-pool").get_attribute("aria-current") == "page"
    assert page.get_by_test_id("kind-live").get_attribute("aria-current") is None
    assert page.get_by_test_id("prompt-input").count() == 0
    assert page.get_by_test_id("model-name-a").inner_text() == "Model A"
    page.keyboard.press("1")
    wait_names_revealed(page)
    vote = Vote.objects.select_related("battle__model_a", "battle__model_b").get()
    assert vote.winner == "model_a" and vote.battle.source == Battle.Source.POOL
    assert {vote.battle.model_a.slug, vote.battle.model_b.slug} == {"imported-1", "imported-2"}
    assert_names_revealed(page, vote.battle)

    # To live battles from the keyboard: the tabs are links, the choice lands in the URL.
    page.get_by_test_id("kind-live").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/?mode=live")
    expect(page.get_by_test_id("prompt-input")).to_be_visible()
    assert page.get_by_test_id("kind-live").get_attribute("aria-current") == "page"
    expect(page.locator("#terms")).to_be_hidden()  # accepted already
    page.get_by_test_id("prompt-input").fill("Say something")
    page.get_by_test_id("send").click()
    expect(page.get_by_test_id("vote-b")).to_be_enabled()
    assert page.get_by_test_id("model-name-b").inner_text() == "Model B"
    page.get_by_test_id("vote-b").click()
    wait_names_revealed(page, "b")
    live_vote = Vote.objects.select_related("battle__model_a", "battle__model_b").get(
        battle__source=Battle.Source.LIVE
    )
    assert live_vote.winner == "model_b"
    assert {live_vote.battle.model_a, live_vote.battle.model_b} == set(live_models)
    assert_names_revealed(page, live_vote.battle)


def test_escape_closes_the_terms_without_accepting_and_voting_waits_for_i_agree(asgi_server, page):
    pool_models()
    page.goto(asgi_server.url + "/")
    dialog = page.locator("#terms")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.get_by_test_id("response-a")).to_contain_text("answers")
    expect(page.locator("#status")).to_contain_text("cannot vote yet")
    assert page.get_by_test_id("terms-open").is_visible()
    assert not TermsAcceptance.objects.exists()
    # The server refuses a vote from this visitor too.
    refused = page.evaluate(
        """async () => {
          const id = (await (await fetch('/api/battles', {method: 'POST', headers: {
            'X-CSRFToken': document.cookie.match(/csrftoken=([^;]+)/)[1]}})).json()).id;
          const r = await fetch('/api/battles/' + id + '/vote', {method: 'POST', headers: {
            'Content-Type': 'application/json',
            'X-CSRFToken': document.cookie.match(/csrftoken=([^;]+)/)[1]},
            body: JSON.stringify({winner: 'model_a'})});
          return [r.status, (await r.json()).error.code];
        }"""
    )
    assert refused == [403, "terms_required"]

    page.get_by_test_id("vote-a").click()  # a vote shows the terms again, and waits
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.keyboard.press("2")
    expect(dialog).to_be_visible()
    page.get_by_test_id("terms-later").click()
    expect(dialog).to_be_hidden()
    assert not TermsAcceptance.objects.exists() and not Vote.objects.exists()
    assert page.get_by_test_id("model-name-a").inner_text() == "Model A"

    page.get_by_test_id("vote-a").click()
    page.get_by_test_id("terms-accept").click()
    wait_names_revealed(page)  # the vote that asked for the terms goes through
    assert TermsAcceptance.objects.count() == 1
    assert Vote.objects.get().winner == "model_a"
    assert not page.get_by_test_id("terms-open").is_visible()
    expect(page.locator("#status")).not_to_contain_text("cannot vote")


def test_a_vote_key_right_after_not_now_shows_the_terms_again(asgi_server, page):
    pool_models()
    page.goto(asgi_server.url + "/")
    dialog = page.locator("#terms")
    expect(dialog).to_be_visible()
    expect(page.get_by_test_id("response-a")).to_contain_text("answers")
    # "Not now" and the key 2 in one go, before the dialog's close event (a task later) is
    # handled: the vote must still ask for the terms, not take the old "not now" as its answer.
    page.evaluate(
        """() => {
          document.getElementById("terms-later").click();
          document.body.dispatchEvent(new KeyboardEvent("keydown", {key: "2", bubbles: true}));
        }"""
    )
    expect(dialog).to_be_visible()
    page.get_by_test_id("terms-accept").click()
    wait_names_revealed(page, "b")
    assert Vote.objects.get().winner == "model_b"
    assert TermsAcceptance.objects.count() == 1
