"""``manage.py rate_snapshot``: write a leaderboard snapshot now, in this process.

For ``make demo`` and for operators: it runs the same service as the Celery task (same lock,
same no-op rule), so it is safe to run while workers are running.
"""

from typing import Any

from django.core.management.base import BaseCommand

from ratings.services import snapshot_refresh


class Command(BaseCommand):
    help = "Compute a leaderboard snapshot from the current votes (no-op if nothing changed)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--force", action="store_true", help="write a new snapshot even if nothing changed"
        )

    def handle(self, *args: Any, force: bool = False, **options: Any) -> None:
        result = snapshot_refresh(force=force)
        if result.created and result.snapshot is not None:
            self.stdout.write(
                f"Snapshot {result.snapshot.pk}: {result.snapshot.n_votes} votes in "
                f"{result.snapshot.duration_seconds:.1f}s."
            )
        elif result.snapshot is not None:
            self.stdout.write(
                f"Snapshot {result.snapshot.pk} already covers the current votes; nothing to do."
            )
