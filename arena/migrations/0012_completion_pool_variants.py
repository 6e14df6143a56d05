"""Several pool answers (variants) per model and prompt: ``Completion.turns_hash``.

The one-pool-answer-per-(prompt, model) constraint becomes one that forbids only the same text
twice: (prompt, model, SHA-256 of the turns) is unique among pool answers. Existing rows get
their hash here, by the formula of ``arena.models.completion_turns_hash`` (frozen below). The
old constraint comes back on reversal only while no model has two variants of one prompt.
"""

import hashlib
import json

from django.db import migrations, models

BATCH = 2000


def _turns_hash(turns):
    return hashlib.sha256(json.dumps(list(turns)).encode()).hexdigest()


def fill_turns_hash(apps, schema_editor):
    Completion = apps.get_model("arena", "Completion")
    pending = []
    for completion in Completion.objects.only("id", "turns").iterator(BATCH):
        turns = completion.turns if isinstance(completion.turns, list) else []
        completion.turns_hash = _turns_hash(turns)
        pending.append(completion)
        if len(pending) == BATCH:
            Completion.objects.bulk_update(pending, ["turns_hash"])
            pending.clear()
    if pending:
        Completion.objects.bulk_update(pending, ["turns_hash"])


class Migration(migrations.Migration):
    dependencies = [
        ("arena", "0011_prompt_text_hash"),
    ]

    operations = [
        migrations.AddField(
            model_name="completion",
            name="turns_hash",
            field=models.CharField(
                blank=True, editable=False, help_text="SHA-256 of the turns.", max_length=64
            ),
        ),
        # Reversing drops the column, so there is nothing to undo.
        migrations.RunPython(fill_turns_hash, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name="completion",
            name="completion_one_pool_answer_per_model",
        ),
        migrations.AddConstraint(
            model_name="completion",
            constraint=models.UniqueConstraint(
                condition=models.Q(("source", "pool")),
                fields=("prompt", "model", "turns_hash"),
                name="completion_pool_variants_differ",
            ),
        ),
    ]
