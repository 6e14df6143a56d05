"""Register a live model from the shell: ``manage.py add_model --slug S --provider-url URL
--upstream-model M [--api-key-env VAR] [--weight W]`` (the admin stays the main way)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.services.models import model_register


class Command(BaseCommand):
    help = "Register (or update) a live model served by an OpenAI-compatible endpoint."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--slug", required=True)
        parser.add_argument(
            "--provider-url", required=True, help="Base URL, e.g. http://127.0.0.1:8001/v1"
        )
        parser.add_argument("--upstream-model", required=True, help="Model name the API expects.")
        parser.add_argument(
            "--api-key-env", default="", help="Environment variable holding the API key."
        )
        parser.add_argument("--weight", type=float, default=1.0, help="Sampling weight.")
        parser.add_argument("--display-name", default="")
        parser.add_argument("--organization", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            model = model_register(
                slug=options["slug"],
                provider_url=options["provider_url"],
                upstream_model=options["upstream_model"],
                api_key_env=options["api_key_env"],
                weight=options["weight"],
                display_name=options["display_name"],
                organization=options["organization"],
            )
        except ArenaError as exc:
            raise CommandError(exc.message) from None
        assert model.provider is not None
        self.stdout.write(
            f"Registered {model.slug} -> {model.upstream_model_id} at {model.provider.base_url}"
        )
