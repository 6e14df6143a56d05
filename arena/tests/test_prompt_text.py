"""What makes two visitors' prompts the same prompt for the leaderboard's cap on repeated
prompts: the normalisation, the hash the live battle service stores, the migration's fill."""

import importlib

import pytest
from django.apps import apps

from arena.live.turns import battle_start_live
from arena.models import USER_PROMPT_SOURCE, Battle, Prompt
from arena.prompt_text import prompt_normalise, prompt_text_hash
from arena.tests.factories import ArenaModelFactory, PromptFactory, ProviderFactory


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("Hello!", "hello"),
        ("  HELLO  ", "hello"),
        ("hello\n\t", "hello"),
        ("ＨＥＬＬＯ", "hello"),  # full-width letters fold under NFKC
        ("¿Qué   tal?", "qué tal"),
        ("what's 2+2?", "what's 2+2"),  # inner punctuation and symbols stay
        ("Straße", "strasse"),
        ("...", ""),
    ],
)
def test_prompt_normalise_folds_case_spacing_end_punctuation_and_compatibility_forms(
    text, normalised
):
    assert prompt_normalise(text) == normalised


def test_prompts_that_differ_only_in_case_and_spacing_share_a_hash():
    assert prompt_text_hash("Hi there!") == prompt_text_hash("  hi   THERE ")
    assert prompt_text_hash("Hi there") != prompt_text_hash("Hi, there")
    assert len(prompt_text_hash("x")) == 64


@pytest.mark.django_db
@pytest.mark.usefixtures("upstream_clients")
def test_a_live_battle_stores_its_prompts_hash():
    provider = ProviderFactory()
    for i in range(2):
        ArenaModelFactory(provider=provider, upstream_model_id=f"up-{i}")

    plan = battle_start_live(session_key="s", prompt="  Hello  World!")

    prompt = Battle.objects.get(pk=plan.battle_id).prompt
    assert prompt.source == USER_PROMPT_SOURCE
    assert prompt.text_hash == prompt_text_hash("hello world")


@pytest.mark.django_db
def test_the_migration_fills_the_hash_of_visitors_prompts_only():
    migration = importlib.import_module("arena.migrations.0011_prompt_text_hash")
    typed = PromptFactory(turns=["Hey!", "and more"], source=USER_PROMPT_SOURCE)
    pool = PromptFactory(turns=["Hey!"], source="mt_bench")

    migration.fill_text_hash(apps, None)

    typed.refresh_from_db()
    pool.refresh_from_db()
    assert typed.text_hash == prompt_text_hash("hey")
    assert pool.text_hash == ""
    assert Prompt.objects.filter(text_hash="").count() == 1
