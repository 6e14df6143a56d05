"""Register a live model from the shell: ``manage.py add_model --slug S --provider-url URL
--upstream-model M [--api-key-env VAR] [--weight W]`` (the admin stays the main way).

An existing slug is changed only with ``--update``, which prints each change (``field: old ->
new``) or "no change"; a deactivated model is re-activated only with ``--activate``.
"""

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.services.models import model_register


class Command(BaseCommand):
    help = (
        "Register a live model served by an OpenAI-compatible endpoint. An existing slug is "
        "refused unless --update is given; then only the options given change."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--slug", required=True)
        parser.add_argument(
            "--provider-url",
            help="Base URL, e.g. http://127.0.0.1:8001/v1 (needed for a new model)",
        )
        parser.add_argument(
            "--upstream-model", help="Model name the API expects (needed for a new model)."
        )
        parser.add_argument("--api-key-env", help="Environment variable holding the API key.")
        parser.add_argument("--weight", type=float, help="Sampling weight (new models: 1.0).")
        parser.add_argument("--display-name")
        parser.add_argument("--organization")
        parser.add_argument(
            "--update",
            action="store_true",
            help="Change an existing model (including turning a pool-only model into a live one).",
        )
        parser.add_argument(
            "--activate", action="store_true", help="Re-activate a deactivated model."
        )
        parser.add_argument(
            "--supports-images",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Vision-capable: drawn for prompts with images (--no-supports-images: not).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = model_register(
                slug=options["slug"],
                provider_url=options["provider_url"],
                upstream_model=options["upstream_model"],
                api_key_env=options["api_key_env"],
                weight=options["weight"],
                display_name=options["display_name"],
                organization=options["organization"],
                update=options["update"],
                activate=options["activate"],
                supports_images=options["supports_images"],
            )
        except ArenaError as exc:
            raise CommandError(exc.message) from None
        model = result.model
        if result.created:
            assert model.provider is not None
            self.stdout.write(
                f"Registered {model.slug} -> {model.upstream_model_id} at {model.provider.base_url}"
            )
            for change in result.changes:  # a shared provider's key variable
                self.stdout.write(f"  {change}")
            return
        if not result.changes:
            self.stdout.write(f"{model.slug}: no change")
        else:
            self.stdout.write(f"Updated {model.slug}:")
            for change in result.changes:
                self.stdout.write(f"  {change}")
        for note in result.notes:
            self.stdout.write(note)
        if result.still_inactive:
            self.stdout.write(
                f"{model.slug} is deactivated and stays so; pass --activate to serve it again."
            )
