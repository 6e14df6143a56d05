from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.management.progress import progress
from arena.services.demo import DEMO_DATA_DIR, demo_load


class Command(BaseCommand):
    help = "Build the demo arena from the bundled MT-bench pool and expert votes (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--data-dir", type=Path, default=DEMO_DATA_DIR)

    def handle(self, *args: Any, data_dir: Path, **options: Any) -> None:
        try:
            result = demo_load(data_dir=data_dir, progress=progress)
        except ArenaError as exc:
            raise CommandError(exc.message) from None
        except OSError as exc:  # a demo data folder with a file missing or unreadable
            raise CommandError(
                f"cannot read the demo data: {exc.strerror}: {exc.filename}"
            ) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo loaded: {result.prompts_created} prompts, "
                f"{result.completions_created} completions, {result.models_created} models, "
                f"{result.battles_created} historical battles and votes created"
                + (
                    f" ({result.votes_skipped_without_text} votes skipped: no texts)"
                    if result.votes_skipped_without_text
                    else ""
                )
                + "."
            )
        )
