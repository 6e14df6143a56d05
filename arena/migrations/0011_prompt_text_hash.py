"""``Prompt.text_hash``: the normalised first turn's SHA-256 of every visitor's prompt.

The refit groups live votes by it to down-sample repeated prompts; existing visitors' prompts
get theirs here, from the same function the live battle service calls (``arena.prompt_text``).
"""

from django.db import migrations, models

from arena.prompt_text import prompt_text_hash

BATCH = 2000


def fill_text_hash(apps, schema_editor):
    Prompt = apps.get_model("arena", "Prompt")
    pending = []
    for prompt in Prompt.objects.filter(source="user").only("id", "turns").iterator(BATCH):
        turns = prompt.turns if isinstance(prompt.turns, list) else []
        first = turns[0] if turns and isinstance(turns[0], str) else ""
        prompt.text_hash = prompt_text_hash(first)
        pending.append(prompt)
        if len(pending) == BATCH:
            Prompt.objects.bulk_update(pending, ["text_hash"])
            pending.clear()
    if pending:
        Prompt.objects.bulk_update(pending, ["text_hash"])


class Migration(migrations.Migration):
    dependencies = [
        ("arena", "0010_model_slug_dots"),
    ]

    operations = [
        migrations.AddField(
            model_name="prompt",
            name="text_hash",
            field=models.CharField(
                blank=True,
                db_index=True,
                help_text="SHA-256 of the normalised first turn (visitors' prompts only).",
                max_length=64,
            ),
        ),
        # Reversing drops the column, so there is nothing to undo.
        migrations.RunPython(fill_text_hash, migrations.RunPython.noop),
    ]
