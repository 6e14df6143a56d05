"""Battles keep a keyed hash of their visitor's session key instead of the key itself.

The stored key let anyone who could read the table (staff in the admin, a backup) act as the
visitor by sending it as the session cookie. Existing rows are hashed in place; the hash cannot
be undone, so going back leaves the hashes (and those battles no longer match their sessions).
"""

import hashlib
import hmac

from django.conf import settings
from django.db import migrations, models

_BATCH = 1000


def _session_hash(session_key: str) -> str:
    # arena.services.identity.session_hash as it stands when this migration is written, copied
    # so that the migration does not change when that module does.
    configured = getattr(settings, "ARENA_SESSION_HASH_KEY", "")
    if configured:
        key = str(configured).encode()
    else:
        key = hmac.new(settings.SECRET_KEY.encode(), b"arena.session-hash", hashlib.sha256).digest()
    message = session_key.encode("utf-8", "surrogatepass")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def hash_session_keys(apps, schema_editor):
    """Replace every stored session key by its hash (rows without a session stay blank)."""
    Battle = apps.get_model("arena", "Battle")
    batch = []
    rows = Battle.objects.exclude(session_hash="").only("pk", "session_hash").order_by("pk")
    for battle in rows.iterator(chunk_size=_BATCH):
        battle.session_hash = _session_hash(battle.session_hash)
        batch.append(battle)
        if len(batch) >= _BATCH:
            Battle.objects.bulk_update(batch, ["session_hash"])
            batch = []
    if batch:
        Battle.objects.bulk_update(batch, ["session_hash"])


class Migration(migrations.Migration):
    dependencies = [
        ("arena", "0002_live_battles"),
    ]

    operations = [
        migrations.RenameField(
            model_name="battle",
            old_name="session_key",
            new_name="session_hash",
        ),
        migrations.AlterField(
            model_name="battle",
            name="session_hash",
            field=models.CharField(
                blank=True,
                db_index=True,
                help_text="Keyed hash (HMAC-SHA256) of the visitor's session key; never the key.",
                max_length=64,
            ),
        ),
        # Reversing keeps the hashes: the keys cannot be recovered from them.
        migrations.RunPython(hash_session_keys, migrations.RunPython.noop, elidable=False),
    ]
