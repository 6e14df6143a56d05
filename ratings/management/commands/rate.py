"""``python manage.py rate INPUT``: Bradley-Terry ratings of a battle file (see ratings.cli)."""

from __future__ import annotations

from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ratings import cli
from ratings.engine import EngineError


class Command(BaseCommand):
    help = "Rate models from a battle file (JSON, JSONL, CSV or Parquet, public arena schema)."

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cli.run(options, cast(TextIO, self.stdout))
        except EngineError as exc:
            raise CommandError(str(exc)) from exc
