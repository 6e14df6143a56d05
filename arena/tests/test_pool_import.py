import importlib
import json

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from arena.models import ArenaModel, Completion, Prompt, completion_turns_hash
from arena.tests.factories import CompletionFactory

pytestmark = pytest.mark.django_db


def write_pool(tmp_path, rows):
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


GOOD = [
    {
        "prompt": ["Write a haiku.", "Now in French."],
        "model": "my-model-7b",
        "completion": ["Leaves fall...", "Les feuilles..."],
        "category": "writing",
        "prompt_id": "q1",
    },
    {
        "prompt": ["Write a haiku.", "Now in French."],
        "model": "other-model",
        "completion": ["Snow...", "Neige..."],
        "category": "writing",
        "prompt_id": "q1",
    },
    {"prompt": "What is 2+2?", "model": "my-model-7b", "completion": "4"},
]


def test_import_pool_creates_prompts_models_and_completions(tmp_path):
    call_command("import_pool", str(write_pool(tmp_path, GOOD)))
    assert Prompt.objects.count() == 2
    assert set(ArenaModel.objects.values_list("slug", flat=True)) == {"my-model-7b", "other-model"}
    haiku = Prompt.objects.get(external_id="q1")
    assert haiku.turns == ["Write a haiku.", "Now in French."] and haiku.category == "writing"
    assert Completion.objects.get(prompt=haiku, model__slug="other-model").turns == [
        "Snow...",
        "Neige...",
    ]


def test_importing_the_same_file_twice_changes_nothing(tmp_path):
    path = write_pool(tmp_path, GOOD)
    call_command("import_pool", str(path))
    call_command("import_pool", str(path))
    assert (Prompt.objects.count(), Completion.objects.count(), ArenaModel.objects.count()) == (
        2,
        3,
        2,
    )


def test_other_texts_of_a_model_answer_are_variants_and_a_repeat_adds_nothing(tmp_path):
    second = {**GOOD[0], "completion": ["Leaves drift...", "Les feuilles tombent..."]}
    path = write_pool(tmp_path, [*GOOD, second, GOOD[0], second])
    call_command("import_pool", str(path))
    call_command("import_pool", str(path))
    variants = Completion.objects.filter(
        prompt__external_id="q1", model__slug="my-model-7b"
    ).order_by("pk")
    assert [c.turns for c in variants] == [GOOD[0]["completion"], second["completion"]]
    assert Completion.objects.count() == 4


def test_the_database_refuses_the_same_pool_text_twice():
    prompt = Prompt.objects.create(turns=["Hi"], source="t")
    model = ArenaModel.objects.create(slug="m", display_name="m")
    turns = ["Hello"]
    Completion.objects.create(
        prompt=prompt, model=model, turns=turns, turns_hash=completion_turns_hash(turns)
    )
    Completion.objects.create(
        prompt=prompt, model=model, turns=["Hey"], turns_hash=completion_turns_hash(["Hey"])
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        Completion.objects.create(
            prompt=prompt, model=model, turns=turns, turns_hash=completion_turns_hash(turns)
        )


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ("{not json", "line 3: not valid JSON"),
        (json.dumps({"model": "m", "completion": "x"}), "line 3: missing 'prompt'"),
        (
            json.dumps({"prompt": ["a", "b"], "model": "m", "completion": ["x"]}),
            "line 3: 'completion' has 1 turns",
        ),
        (json.dumps({"prompt": "", "model": "m", "completion": "x"}), "line 3: 'prompt' must be"),
        (json.dumps({"prompt": "a", "model": 5, "completion": "x"}), "line 3: 'model'"),
        (json.dumps(["a list"]), "line 3: expected a JSON object"),
    ],
)
def test_malformed_line_is_reported_by_number_and_nothing_is_imported(tmp_path, bad_line, expected):
    path = write_pool(tmp_path, [GOOD[0], GOOD[1], bad_line, GOOD[2]])
    with pytest.raises(CommandError, match=expected):
        call_command("import_pool", str(path))
    assert not Prompt.objects.exists()
    assert not Completion.objects.exists()
    assert not ArenaModel.objects.exists()


def test_conflicting_prompt_ids_roll_back_the_whole_file(tmp_path):
    conflicting = dict(GOOD[1], prompt=["Another prompt.", "x"])
    with pytest.raises(CommandError, match="line 2: prompt_id 'q1'"):
        call_command("import_pool", str(write_pool(tmp_path, [GOOD[0], conflicting])))
    assert not Prompt.objects.exists() and not ArenaModel.objects.exists()


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_pool", str(tmp_path / "nope.jsonl"))


def test_the_migration_fills_the_hash_of_every_stored_completion():
    migration = importlib.import_module("arena.migrations.0012_completion_pool_variants")
    pooled = CompletionFactory(turns=["Hello é", "again"])
    reference = CompletionFactory(turns=["A reference"], source=Completion.Source.REFERENCE)
    Completion.objects.update(turns_hash="")

    migration.fill_turns_hash(apps, None)

    pooled.refresh_from_db()
    reference.refresh_from_db()
    assert pooled.turns_hash == completion_turns_hash(["Hello é", "again"])
    assert reference.turns_hash == completion_turns_hash(["A reference"])
