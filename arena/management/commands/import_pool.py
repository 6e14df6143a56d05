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
        parser.add_argument(
            "--images-root",
            type=Path,
            help="Folder the images' paths are read under, and nothing outside it (default: the "
            "file's folder)",
        )
        parser.add_argument(
            "--images-allow-host",
            action="append",
            default=[],
            metavar="HOST_OR_NETWORK",
            help="A host name, address or network (10.0.0.0/8) image URLs may reach although it "
            "is loopback, private or otherwise not public; repeat for more",
        )

    def handle(
        self,
        *args: Any,
        file: Path,
        source: str | None,
        images_root: Path | None,
        images_allow_host: list[str],
        **options: Any,
    ) -> None:
        try:
            result = pool_import(
                path=file,
                source=source,
                progress=progress,
                images_root=images_root,
                images_allow_hosts=images_allow_host,
            )
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
