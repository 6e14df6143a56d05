"""The battle page offers each kind of battle that can be served: live and pool."""

import re

import pytest

from arena.models import ArenaModel
from arena.tests.factories import (
    ArenaModelFactory,
    CompletionFactory,
    PromptFactory,
    ProviderFactory,
)

pytestmark = pytest.mark.django_db


def pool(n_models: int = 2) -> list[ArenaModel]:
    prompt = PromptFactory()
    models = [ArenaModelFactory() for _ in range(n_models)]
    for model in models:
        CompletionFactory(prompt=prompt, model=model, turns=["An answer."])
    return models


def live(n: int = 2) -> list[ArenaModel]:
    provider = ProviderFactory()
    return [ArenaModelFactory(provider=provider, upstream_model_id=f"up-{i}") for i in range(n)]


def page(client, query: str = "") -> str:
    response = client.get("/" + query)
    assert response.status_code == 200
    return response.content.decode()


def mode_of(html: str) -> str:
    return re.search(r'data-mode="(\w+)"', html).group(1)


def offered(html: str) -> list[str]:
    return re.findall(r'data-testid="kind-(\w+)"', html)


def current(html: str) -> list[str]:
    return re.findall(r'href="\?mode=(\w+)"[^>]*aria-current="page"', html)


def test_pool_only_serves_pool_battles_without_a_choice(client):
    pool()
    html = page(client)
    assert mode_of(html) == "pool" and offered(html) == []
    assert 'data-testid="prompt-input"' not in html


def test_live_only_serves_live_battles_without_a_choice(client):
    live()
    html = page(client, "?mode=pool")  # not available: the page serves what it can
    assert mode_of(html) == "live" and offered(html) == []
    assert 'data-testid="prompt-input"' in html


def test_with_both_kinds_both_are_offered_and_the_url_picks_one(client):
    pool()
    live()
    html = page(client)
    assert offered(html) == ["live", "pool"]
    assert mode_of(html) == "live" and current(html) == ["live"]
    assert "Rate two answers" in html and "Ask two models" in html

    html = page(client, "?mode=pool")
    assert mode_of(html) == "pool" and current(html) == ["pool"]
    assert offered(html) == ["live", "pool"]
    assert 'data-testid="prompt-input"' not in html

    html = page(client, "?mode=live")
    assert mode_of(html) == "live" and 'data-testid="prompt-input"' in html
    assert mode_of(page(client, "?mode=nonsense")) == "live"


def test_a_pool_needs_two_active_models_answering_one_prompt(client):
    live()
    models = pool()
    ArenaModel.objects.filter(pk=models[0].pk).update(is_active=False)
    assert offered(page(client)) == []
    ArenaModel.objects.filter(pk=models[0].pk).update(is_active=True, sampling_weight=0)
    assert offered(page(client)) == []
    # Two models that never answered the same prompt cannot battle either.
    CompletionFactory(model=models[1])
    CompletionFactory(model=ArenaModelFactory())
    assert offered(page(client)) == []
    ArenaModel.objects.filter(pk=models[0].pk).update(sampling_weight=1)
    assert offered(page(client)) == ["live", "pool"]


def test_with_neither_kind_the_page_is_in_pool_mode_and_offers_nothing(client):
    html = page(client)
    assert mode_of(html) == "pool" and offered(html) == []


def test_the_page_has_no_inline_script_style_or_event_handler(client):
    pool()
    live()
    html = page(client, "?mode=pool")
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)
