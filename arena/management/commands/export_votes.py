from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.exports import (
    FORMATS,
    ExportStats,
    export_options,
    export_rows,
    voted_battles,
    write_jsonl,
    write_parquet,
)


class Command(BaseCommand):
    help = (
        "Export votes as preference data: the public arena schema, TRL, OpenAI preference "
        "fine-tuning or HH-RLHF. JSONL to standard output or --output; Parquet when --output "
        "ends in .parquet. By default only what the leaderboard counts (anonymous, unflagged)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", required=True, choices=FORMATS)
        parser.add_argument("--output", "-o", type=Path, help="file to write (default: stdout)")
        parser.add_argument("--include-named", action="store_true", help="named-mode votes too")
        parser.add_argument(
            "--include-flagged", action="store_true", help="flagged votes (too fast, bots) too"
        )
        parser.add_argument("--since", help="votes at or after this ISO date or datetime (UTC)")
        parser.add_argument("--until", help="votes before this ISO date or datetime (UTC)")

    def handle(self, *args: Any, output: Path | None, **options: Any) -> None:
        params = {
            "format": options["format"],
            "include_named": "1" if options["include_named"] else "0",
            "include_flagged": "1" if options["include_flagged"] else "0",
            "since": options["since"] or "",
            "until": options["until"] or "",
        }
        try:
            fmt, filters = export_options(params)
        except ArenaError as exc:
            raise CommandError(f"--{exc.field}: {exc.message}") from exc
        stats = ExportStats()
        rows = export_rows(voted_battles(**filters), fmt, stats)
        if output is None:
            write_jsonl(rows, self.stdout)
        else:
            # Written beside the target and moved into place: a failed export leaves no
            # half-written file under the name a training job reads.
            partial = output.with_name(output.name + ".partial")
            try:
                if output.suffix == ".parquet":
                    write_parquet(rows, str(partial))
                else:
                    with partial.open("w", encoding="utf-8") as handle:
                        write_jsonl(rows, handle)
                partial.replace(output)
            finally:
                partial.unlink(missing_ok=True)
        self.stderr.write(f"{fmt}: {stats.summary()}")
