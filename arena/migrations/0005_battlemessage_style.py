"""Each answer keeps its style counts, counted when it is saved instead of when the battle is
voted on. Existing answers keep null and are counted at their vote, as before."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("arena", "0004_unused_choices"),
    ]

    operations = [
        migrations.AddField(
            model_name="battlemessage",
            name="style",
            field=models.JSONField(
                blank=True,
                help_text="Style counts of the answer (answer_style.style_counts): tokens, headers, lists, bold.",
                null=True,
            ),
        ),
    ]
