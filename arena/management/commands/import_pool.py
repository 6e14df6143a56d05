from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.management.progress import progress
from arena.services.pool import PROMPT_CATEGORIES, pool_import


class Command(BaseCommand):
    help = (
        "Import prompts and completions from a JSONL file (one object per line with 'prompt', "
        "'model', 'completion' and optional 'category' (one of "
        + ", ".join(PROMPT_CATEGORIES)
        + "), 'language' (a language tag such as en, en-US, zh-Hant) and 'prompt_id'). "
        "Every malformed line is reported; nothing is imported if any line is malformed. "
        "Another text of a model's answer to a prompt adds a variant, shown in rotation."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--source", help="Source label of the prompts (default import:<name>)")

    def handle(self, *args: Any, file: Path, source: str | None, **options: Any) -> None:
        try:
            result = pool_import(path=file, source=source, progress=progress)
        except ArenaError as exc:
            # One line per malformed line of the file: the summary, then each line's problem.
            raise CommandError(exc.message) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {result.lines} lines: {result.prompts_created} new prompts, "
                f"{result.completions_created} new completions, "
                f"{len(result.models_created)} new models, {result.images_stored} images"
                + (f" ({', '.join(result.models_created)})" if result.models_created else "")
                + "."
            )
        )
