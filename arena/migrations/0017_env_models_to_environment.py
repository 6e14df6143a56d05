"""The environment API's models (EnvRun, EnvSubmission, EnvCompletion, EnvBattle) leave the
arena for the ``environment`` app, which keeps their tables (``arena_envrun`` and so on, the
runs' references in ``arena_envrun_references``): the arena's state forgets them and the
database is not touched, so no row moves and no table is dropped. Their content types follow
them (same ids), so staff permissions and the admin's log entries stay theirs."""

from django.db import migrations

MOVED = ["envrun", "envsubmission", "envcompletion", "envbattle"]


def content_types_forward(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    # A fresh database has none yet; one where both exist keeps the environment's.
    taken = set(
        ContentType.objects.using(db)
        .filter(app_label="environment", model__in=MOVED)
        .values_list("model", flat=True)
    )
    ContentType.objects.using(db).filter(app_label="arena", model__in=MOVED).exclude(
        model__in=taken
    ).update(app_label="environment")


def content_types_backward(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    taken = set(
        ContentType.objects.using(db)
        .filter(app_label="arena", model__in=MOVED)
        .values_list("model", flat=True)
    )
    ContentType.objects.using(db).filter(app_label="environment", model__in=MOVED).exclude(
        model__in=taken
    ).update(app_label="arena")


class Migration(migrations.Migration):
    dependencies = [
        ("arena", "0016_env_battle_counted"),
        # The models exist in the environment app's state before they leave the arena's.
        ("environment", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="EnvBattle"),
                migrations.DeleteModel(name="EnvCompletion"),
                migrations.DeleteModel(name="EnvSubmission"),
                migrations.DeleteModel(name="EnvRun"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_forward, content_types_backward),
    ]
