from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.management.progress import progress
from arena.services.pool_generate import DEFAULT_TEMPERATURE, MAX_VARIANTS, pool_generate


class Command(BaseCommand):
    help = (
        "Ask a model's provider for more answers to the pool's prompts and store them as the "
        "model's pool variants (shown in rotation). A prompt is stored only when every call "
        "for it succeeded; each failing prompt is reported."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model", required=True, help="Slug of a model with a provider")
        parser.add_argument(
            "--variants", type=int, default=1, help=f"Answers per prompt (1-{MAX_VARIANTS})"
        )
        parser.add_argument(
            "--prompts", type=int, nargs="+", help="Prompt ids (default: every pool prompt)"
        )
        parser.add_argument(
            "--temperature",
            type=float,
            help=f"Above 0 (default: the model's own, else {DEFAULT_TEMPERATURE})",
        )

    def handle(
        self,
        *args: Any,
        model: str,
        variants: int,
        prompts: list[int] | None,
        temperature: float | None,
        **options: Any,
    ) -> None:
        try:
            result = pool_generate(
                model_slug=model,
                variants=variants,
                prompt_ids=prompts,
                temperature=temperature,
                progress=progress,
            )
        except ArenaError as exc:
            raise CommandError(exc.message) from None
        for failure in result.failures:
            self.stderr.write(f"prompt {failure.prompt_id}: {failure.message}")
        summary = (
            f"{result.model} at temperature {result.temperature:g}: "
            f"{result.prompts - len(result.failures)} of {result.prompts} prompts answered, "
            f"{result.variants_created} new variants, {result.duplicates} duplicates"
        )
        if result.failures:
            raise CommandError(
                f"{summary}; {len(result.failures)} prompts failed and were left as they were."
            )
        self.stdout.write(self.style.SUCCESS(summary + "."))
