from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.services.pool import pool_import


class Command(BaseCommand):
    help = (
        "Import prompts and completions from a JSONL file (one object per line with 'prompt', "
        "'model', 'completion' and optional 'category', 'language', 'prompt_id'). "
        "Nothing is imported if any line is malformed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--source", help="Source label of the prompts (default import:<name>)")

    def handle(self, *args: Any, file: Path, source: str | None, **options: Any) -> None:
        try:
            result = pool_import(path=file, source=source)
        except ArenaError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {result.lines} lines: {result.prompts_created} new prompts, "
                f"{result.completions_created} new completions, "
                f"{result.completions_updated} updated, "
                f"{len(result.models_created)} new models"
                + (f" ({', '.join(result.models_created)})" if result.models_created else "")
                + "."
            )
        )
