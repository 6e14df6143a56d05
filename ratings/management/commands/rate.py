"""``python manage.py rate INPUT``: Bradley-Terry ratings of a battle file (see ratings.cli)."""

from __future__ import annotations

from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ratings import cli
from ratings.engine.errors import EngineError


class Command(BaseCommand):
    help = "Rate models from a battle file (JSON, JSONL, CSV or Parquet, public arena schema)."
    # No system checks: the command reads a file and touches neither the database nor the URLs,
    # and the URL check alone imports every view (pandas, django-ninja) before the engine starts.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cli.run(options, cast(TextIO, self.stdout))
        except EngineError as exc:
            raise CommandError(str(exc)) from exc
