"""The environment API's models, moved here from the arena (its migration 0017) with their
tables: this creates them in the migration state only. The tables are the arena's, created by
arena 0006-0016 and kept under their names (``Meta.db_table``), so nothing runs on the database."""

import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("arena", "0016_env_battle_counted"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="EnvRun",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("name", models.CharField(max_length=200)),
                        ("votes_per_completion", models.PositiveSmallIntegerField(default=3)),
                        ("ttl_hours", models.PositiveIntegerField(default=72)),
                        (
                            "share",
                            models.FloatField(
                                default=0.2,
                                help_text="Highest fraction of the battles served that may come from this run.",
                            ),
                        ),
                        ("webhook_url", models.URLField(blank=True, max_length=500)),
                        (
                            "webhook_secret",
                            models.CharField(
                                help_text="HMAC-SHA256 key of the webhook.", max_length=64
                            ),
                        ),
                        (
                            "state",
                            models.CharField(
                                choices=[("open", "Open"), ("closed", "Closed")],
                                default="open",
                                max_length=10,
                            ),
                        ),
                        ("reward_seq", models.PositiveBigIntegerField(default=0)),
                        ("webhook_seq", models.PositiveBigIntegerField(default=0)),
                        (
                            "webhook_status",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("", "Not attempted"),
                                    ("delivered", "Delivered"),
                                    ("failed", "Failed"),
                                    ("refused", "Refused"),
                                ],
                                default="",
                                max_length=10,
                            ),
                        ),
                        ("webhook_error", models.CharField(blank=True, max_length=500)),
                        ("webhook_attempted_at", models.DateTimeField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("closed_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "closed_reason",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("", "Not closed"),
                                    ("trainer", "Closed by its trainer"),
                                    ("idle", "Closed: its trainer stopped calling"),
                                    ("staff", "Closed by staff"),
                                ],
                                default="",
                                max_length=10,
                            ),
                        ),
                        (
                            "touched_at",
                            models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                        ),
                        ("reward_model", models.BooleanField(default=False)),
                        (
                            "model",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="env_run",
                                to="arena.arenamodel",
                            ),
                        ),
                        (
                            "references",
                            models.ManyToManyField(
                                blank=True, related_name="+", to="arena.arenamodel"
                            ),
                        ),
                        (
                            "token",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="runs",
                                to="arena.apitoken",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "environment run",
                        "db_table": "arena_envrun",
                        "ordering": ["-created_at"],
                    },
                ),
                migrations.CreateModel(
                    name="EnvSubmission",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("idempotency_key", models.CharField(max_length=200)),
                        ("request_hash", models.CharField(max_length=64)),
                        (
                            "messages",
                            models.JSONField(
                                help_text="The prompt as role/content messages, as submitted."
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("expires_at", models.DateTimeField(db_index=True)),
                        (
                            "prompt",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="arena.prompt",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="submissions",
                                to="environment.envrun",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "arena_envsubmission",
                        "ordering": ["created_at"],
                    },
                ),
                migrations.CreateModel(
                    name="EnvCompletion",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        (
                            "index",
                            models.PositiveSmallIntegerField(
                                help_text="0-based position in the group."
                            ),
                        ),
                        ("text", models.TextField()),
                        (
                            "meta",
                            models.JSONField(
                                blank=True, default=dict, help_text="The trainer's, returned as is."
                            ),
                        ),
                        ("style", models.JSONField(blank=True, null=True)),
                        ("votes", models.PositiveIntegerField(default=0)),
                        ("wins", models.PositiveIntegerField(default=0)),
                        ("losses", models.PositiveIntegerField(default=0)),
                        ("ties", models.PositiveIntegerField(default=0)),
                        ("both_bad", models.PositiveIntegerField(default=0)),
                        ("score", models.FloatField(blank=True, null=True)),
                        ("score_low", models.FloatField(blank=True, null=True)),
                        ("score_high", models.FloatField(blank=True, null=True)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("complete", "Complete"),
                                    ("expired", "Expired"),
                                    ("cancelled", "Cancelled"),
                                ],
                                default="pending",
                                max_length=10,
                            ),
                        ),
                        (
                            "source",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("", "No score yet"),
                                    ("human", "Visitors' votes"),
                                    ("model", "The reward model"),
                                ],
                                default="",
                                max_length=10,
                            ),
                        ),
                        ("model_score", models.FloatField(blank=True, null=True)),
                        ("model_score_low", models.FloatField(blank=True, null=True)),
                        ("model_score_high", models.FloatField(blank=True, null=True)),
                        (
                            "model_snapshot_id",
                            models.PositiveBigIntegerField(blank=True, null=True),
                        ),
                        ("seq", models.PositiveBigIntegerField()),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="completions",
                                to="environment.envrun",
                            ),
                        ),
                        (
                            "submission",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="completions",
                                to="environment.envsubmission",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "arena_envcompletion",
                        "ordering": ["run", "seq"],
                    },
                ),
                migrations.CreateModel(
                    name="EnvBattle",
                    fields=[
                        (
                            "battle",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.PROTECT,
                                primary_key=True,
                                related_name="env",
                                serialize=False,
                                to="arena.battle",
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("counted", models.BooleanField(default=True)),
                        (
                            "completion_a",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="environment.envcompletion",
                            ),
                        ),
                        (
                            "completion_b",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="environment.envcompletion",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="battles",
                                to="environment.envrun",
                            ),
                        ),
                        (
                            "submission",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="battles",
                                to="environment.envsubmission",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "arena_envbattle",
                    },
                ),
                migrations.AddConstraint(
                    model_name="envrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("share__gt", 0), ("share__lte", 1)),
                        name="envrun_share_in_0_1",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="envsubmission",
                    constraint=models.UniqueConstraint(
                        fields=("run", "idempotency_key"),
                        name="envsubmission_idempotency_key_per_run",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="envcompletion",
                    constraint=models.UniqueConstraint(
                        fields=("submission", "index"), name="envcompletion_one_per_group_position"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="envcompletion",
                    constraint=models.UniqueConstraint(
                        fields=("run", "seq"), name="envcompletion_seq_unique_in_run"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="envbattle",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("completion_a__isnull", False),
                            ("completion_b__isnull", False),
                            _connector="OR",
                        ),
                        name="envbattle_at_least_one_submitted_side",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
