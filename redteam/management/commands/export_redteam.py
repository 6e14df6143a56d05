from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from redteam.exports import export_write


class Command(BaseCommand):
    help = "Write the red-teaming attempts as a data set (JSONL or Parquet) with its card."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, type=Path)
        parser.add_argument("--parquet", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        path = export_write(out=options["out"], parquet=options["parquet"])
        self.stdout.write(f"wrote {path}")
