"""End to end in Chromium: the demo arena's pool battle, from terms to revealed names."""

import json
import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from arena.models import ArenaModel, Battle, BattleMessage, Vote
from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory
from tests.helpers import assert_names_revealed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def record_bodies(page):
    """Every response body the page receives, as text."""
    bodies = []

    def on_response(response):
        try:
            bodies.append(response.text())
        except Exception:  # redirects and aborted requests have no body
            bodies.append("")

    page.on("response", on_response)
    return bodies


def test_visitor_completes_a_demo_pool_battle_and_sees_the_names(asgi_server, page):
    call_command("load_demo", verbosity=0)
    bodies = record_bodies(page)
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-b")).to_have_text(re.compile(r"\S"), use_inner_text=True)
    assert page.get_by_test_id("prompt").inner_text().strip()
    assert page.get_by_test_id("model-name-a").inner_text() == "Model A"

    sent_before_vote = "\n".join(bodies)
    # Model output and prompts may mention a model ("as GPT-4 would..."); that text is content, not a leak
    # of identity, so the texts shown are taken out before looking for names.
    shown = BattleMessage.objects.exclude(battle__source=Battle.Source.IMPORT)
    for texts in shown.values_list("content", "user_content"):
        for text in texts:
            sent_before_vote = sent_before_vote.replace(json.dumps(text)[1:-1], "")
    for model in ArenaModel.objects.all():
        assert f'"{model.slug}"' not in sent_before_vote
        assert model.display_name not in sent_before_vote

    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A", use_inner_text=True)
    vote = Vote.objects.exclude(battle__source=Battle.Source.IMPORT).get()
    assert vote.winner == "model_a"
    assert vote.style["sum_assistant_a_tokens"] > 0 and "header_count_b" in vote.style
    assert_names_revealed(page, vote.battle)

    page.get_by_test_id("next-battle").click()
    expect(page.get_by_test_id("model-name-a")).to_have_text("Model A", use_inner_text=True)
    expect(page.get_by_test_id("vote-b")).to_be_enabled()
    page.keyboard.press("2")
    expect(page.get_by_test_id("model-name-b")).not_to_have_text("Model B", use_inner_text=True)
    assert list(
        Vote.objects.exclude(battle__source=Battle.Source.IMPORT)
        .order_by("created_at")
        .values_list("winner", flat=True)
    ) == ["model_a", "model_b"]


XSS_PAYLOADS = [
    "<script>window.__xss = 1</script>",
    '<img src="x" onerror="window.__xss = 2">',
    "[click](javascript:window.__xss=3)",
    '<svg onload="window.__xss=4"></svg>',
    '<iframe src="javascript:parent.__xss=5"></iframe>',
    '![x](x" onerror="window.__xss=6)',
    '<a href="javascript:window.__xss=7">link</a>',
    "```html\n<script>window.__xss=8</script>\n```",
    '<details open ontoggle="window.__xss=9">',
]


def test_model_text_never_runs_as_html_or_script(asgi_server, page):
    prompt = PromptFactory(turns=["Show me some HTML."])
    payload = "\n\n".join(XSS_PAYLOADS)
    for model in (ArenaModelFactory(), ArenaModelFactory()):
        CompletionFactory(prompt=prompt, model=model, turns=[payload])
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-a")).to_contain_text("click", use_inner_text=True)
    page.get_by_text("click").first.click()
    page.get_by_text("link").first.click()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__xss") is None
    assert dialogs == []
    dangerous = page.evaluate(
        """() => {
          const root = document.querySelector('[data-testid=response-a]');
          const bad = [];
          root.querySelectorAll('*').forEach((el) => {
            if (['SCRIPT', 'IFRAME', 'OBJECT', 'EMBED', 'SVG'].includes(el.tagName.toUpperCase())) bad.push(el.tagName);
            for (const attr of el.attributes) {
              if (attr.name.startsWith('on')) bad.push(el.tagName + ' ' + attr.name);
              if (/^\\s*javascript:/i.test(attr.value)) bad.push(el.tagName + ' ' + attr.name + '=' + attr.value);
            }
          });
          return bad;
        }"""
    )
    assert dangerous == []
    # the code block keeps the script visible as text
    assert "window.__xss=8" in page.get_by_test_id("response-a").inner_text()
    assert json.dumps(page.evaluate("typeof window.__xss")) == '"undefined"'


def test_a_markdown_image_is_a_link_and_is_never_fetched(asgi_server, page):
    prompt = PromptFactory(turns=["Draw me something."])
    pixel = asgi_server.url + "/static/tracking-pixel.png?who=voter"
    for model in (ArenaModelFactory(), ArenaModelFactory()):
        CompletionFactory(prompt=prompt, model=model, turns=[f"Here: ![a cat]({pixel}) done."])
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    expect(page.get_by_test_id("response-a")).to_contain_text("done", use_inner_text=True)
    page.wait_for_timeout(300)
    assert page.locator("[data-testid=response-a] img").count() == 0
    link = page.locator("[data-testid=response-a] a", has_text="[image: a cat]")
    assert link.get_attribute("href") == pixel
    assert not any("tracking-pixel" in url for url in requested)
