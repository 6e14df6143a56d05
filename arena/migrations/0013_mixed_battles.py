"""Mixed battles: ``Battle.Source.MIXED`` and ``Battle.live_side``, the side answered live.

A pool prompt answered live by a live model against an established model's stored pool answer
(``arena.services.bridge``); existing battles keep a blank ``live_side``.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("arena", "0012_completion_pool_variants"),
    ]

    operations = [
        migrations.AddField(
            model_name="battle",
            name="live_side",
            field=models.CharField(
                blank=True,
                choices=[("a", "A"), ("b", "B")],
                help_text="Mixed battles: the side answered live.",
                max_length=1,
            ),
        ),
        migrations.AlterField(
            model_name="battle",
            name="source",
            field=models.CharField(
                choices=[
                    ("pool", "Pool"),
                    ("live", "Live"),
                    ("mixed", "Mixed (pool prompt, one live answer)"),
                    ("import", "Imported"),
                    ("env", "Environment"),
                ],
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="battle",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("live_side__in", ["a", "b"]), ("source", "mixed")),
                    models.Q(models.Q(("source", "mixed"), _negated=True), ("live_side", "")),
                    _connector="OR",
                ),
                name="battle_live_side_iff_mixed",
            ),
        ),
    ]
