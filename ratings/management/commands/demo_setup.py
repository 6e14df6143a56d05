"""``manage.py demo_setup``: the demo arena from nothing, in one process (``make demo``).

The database's tables, the bundled MT-bench pool and expert votes, then the first leaderboard
snapshot: ``migrate``, ``load_demo`` and ``rate_snapshot`` in turn, each announced with what it
is doing and followed by its time, so that a newcomer watching ``make demo`` knows where it is.
One process rather than three saves two start-ups of Django and the rating engine's imports.
Each step is idempotent, so a second ``make demo`` passes over what is already there.
"""

import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

STEPS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("migrate", "creating or updating the database's tables", {"interactive": False}),
    ("load_demo", "loading the demo's prompts, answers and expert votes", {}),
    ("rate_snapshot", "fitting the first leaderboard (Bradley-Terry, style control)", {}),
)


class Command(BaseCommand):
    help = "Migrate, load the demo data and write the first leaderboard snapshot."

    def handle(self, *args: Any, **options: Any) -> None:
        for name, doing, kwargs in STEPS:
            self.stdout.write(f"[demo] {doing} ({name})")
            self.stdout.flush()
            started = time.monotonic()
            call_command(name, verbosity=0 if name == "migrate" else 1, **kwargs)
            self.stdout.write(f"[demo] {name}: {time.monotonic() - started:.1f} s")
