"""A database trigger that refuses any UPDATE of a leaderboard snapshot.

``LeaderboardSnapshot.save`` refuses to update an existing row; this covers ``QuerySet.update``
and raw SQL too. PostgreSQL and SQLite only (the two databases the project runs on).
"""

from django.db import migrations

POSTGRES_FORWARD = [
    """
CREATE OR REPLACE FUNCTION ratings_snapshot_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'leaderboard snapshots are immutable; write a new one';
END;
$$ LANGUAGE plpgsql
""",
    """
CREATE TRIGGER ratings_snapshot_immutable BEFORE UPDATE ON ratings_leaderboardsnapshot
    FOR EACH ROW EXECUTE FUNCTION ratings_snapshot_refuse_update()
""",
]
POSTGRES_REVERSE = [
    "DROP TRIGGER IF EXISTS ratings_snapshot_immutable ON ratings_leaderboardsnapshot",
    "DROP FUNCTION IF EXISTS ratings_snapshot_refuse_update()",
]
SQLITE_FORWARD = """
CREATE TRIGGER ratings_snapshot_immutable BEFORE UPDATE ON ratings_leaderboardsnapshot
BEGIN
    SELECT RAISE(ABORT, 'leaderboard snapshots are immutable; write a new one');
END;
"""
SQLITE_REVERSE = "DROP TRIGGER IF EXISTS ratings_snapshot_immutable;"


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in POSTGRES_FORWARD:
            schema_editor.execute(statement)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_FORWARD)


def reverse(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in POSTGRES_REVERSE:
            schema_editor.execute(statement)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_REVERSE)


class Migration(migrations.Migration):
    dependencies = [("ratings", "0001_snapshot")]

    operations = [migrations.RunPython(forward, reverse)]
