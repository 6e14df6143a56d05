import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.exports import (
    FORMATS,
    ExportRow,
    ExportStats,
    export_options,
    export_rows,
    voted_battles,
    write_jsonl,
    write_parquet,
)
from arena.management.progress import on_terminal, progress_iter
from arena.selectors import votes_for_export


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
        if output is not None:
            folder = output.parent
            if not folder.is_dir():
                raise CommandError(f"--output: the folder {folder} does not exist.")
            if output.is_dir():
                raise CommandError(f"--output: {output} is a folder; name a file in it.")
        stats = ExportStats()
        # The count costs a query, so it is made only when a bar is shown.
        total = votes_for_export(**filters).count() if on_terminal() else None
        records = progress_iter(voted_battles(**filters), desc=fmt, total=total, unit="vote")
        rows = export_rows(records, fmt, stats)
        if output is None:
            self._to_stdout(rows)
        else:
            self._to_file(rows, output)
        self.stderr.write(f"{fmt}: {stats.summary()}")

    def _to_stdout(self, rows: Iterable[ExportRow]) -> None:
        try:
            write_jsonl(rows, self.stdout)
            self.stdout.flush()
        except BrokenPipeError:
            # The reader left (``| head``): the way the Python docs give for SIGPIPE. Further
            # writes, including the interpreter's last flush, go to devnull; exit quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)

    def _to_file(self, rows: Iterable[ExportRow], output: Path) -> None:
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
        except OSError as exc:
            raise CommandError(f"--output: cannot write {output}: {exc.strerror or exc}") from None
        finally:
            partial.unlink(missing_ok=True)
