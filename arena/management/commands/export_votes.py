import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.errors import ArenaError
from arena.exports import (
    FORMATS,
    VOTES_LICENSE,
    ExportRow,
    ExportStats,
    copied_rows,
    export_options,
    export_rows,
    supported,
    voted_battles,
    write_dataset,
    write_jsonl,
    write_jsonl_bytes,
    write_parquet,
)
from arena.exports.pgcopy import DETAILS
from arena.management.progress import on_terminal, progress_iter
from arena.selectors import votes_for_export


class Command(BaseCommand):
    help = (
        "Export votes as preference data: the public arena schema, TRL (DPO, reward), TRL KTO, "
        "OpenAI preference fine-tuning or HH-RLHF. JSONL to standard output or --output; Parquet "
        "when --output ends in .parquet or with --parquet. --output DIR/ writes the data file "
        "and a dataset card that datasets.load_dataset(DIR) reads. By default only what the "
        "leaderboard counts (anonymous, unflagged)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", required=True, choices=FORMATS)
        parser.add_argument(
            "--output",
            "-o",
            help="file to write (default: stdout), or a folder (a path ending in / or an "
            "existing folder) for the data file and its dataset card README.md",
        )
        parser.add_argument("--parquet", action="store_true", help="write Parquet, not JSONL")
        parser.add_argument("--include-named", action="store_true", help="named-mode votes too")
        parser.add_argument(
            "--include-flagged", action="store_true", help="flagged votes (too fast, bots) too"
        )
        parser.add_argument("--since", help="votes at or after this ISO date or datetime (UTC)")
        parser.add_argument("--until", help="votes before this ISO date or datetime (UTC)")
        parser.add_argument(
            "--model",
            action="append",
            default=[],
            metavar="SLUG",
            help="battles where either side is this model (repeatable)",
        )
        parser.add_argument(
            "--first-turn-only",
            action="store_true",
            help="rows of the first turn alone: the first user turn and the first answers",
        )
        parser.add_argument("--category", help="battles on prompts of this category")
        parser.add_argument("--language", help="battles on prompts in this language (e.g. en)")
        parser.add_argument(
            "--license",
            default=VOTES_LICENSE,
            help=f"licence named in a folder's dataset card (default: {VOTES_LICENSE})",
        )

    def handle(self, *args: Any, output: str | None, parquet: bool, **options: Any) -> None:
        params = {
            "format": options["format"],
            "include_named": "1" if options["include_named"] else "0",
            "include_flagged": "1" if options["include_flagged"] else "0",
            "since": options["since"] or "",
            "until": options["until"] or "",
            "category": options["category"] or "",
            "language": options["language"] or "",
        }
        try:
            fmt, filters = export_options(params, models=options["model"])
        except ArenaError as exc:
            raise CommandError(f"--{exc.field}: {exc.message}") from exc
        folder = self._folder(output)
        target = None if output is None or folder is not None else Path(output)
        if target is not None and not target.parent.is_dir():
            raise CommandError(f"--output: the folder {target.parent} does not exist.")
        if output is None and parquet:
            raise CommandError("--parquet: Parquet needs --output (a file or a folder).")
        stats = ExportStats()
        first_turn_only = options["first_turn_only"]
        rows: Iterable[ExportRow | bytes]
        if supported():
            # PostgreSQL: one COPY statement streams the votes and each row is made from its
            # bytes (arena.exports.pgcopy); the bar counts the rows written.
            rows = copied_rows(fmt, stats, first_turn_only=first_turn_only, **filters)
            rows = progress_iter(rows, desc=fmt, total=None, unit="row")
        else:
            # The count costs a query, so it is made only when a bar is shown.
            total = votes_for_export(**filters).count() if on_terminal() else None
            votes = voted_battles(details=fmt in DETAILS, **filters)
            records = progress_iter(votes, desc=fmt, total=total, unit="vote")
            rows = export_rows(records, fmt, stats, first_turn_only=first_turn_only)
        if folder is not None:
            try:
                data = write_dataset(
                    rows,
                    folder,
                    fmt,
                    stats=stats,
                    # The card lists the first-turn-only choice among the filters.
                    filters={**filters, "first_turn_only": first_turn_only},
                    parquet=parquet,
                    license=options["license"],
                )
            except OSError as exc:
                raise CommandError(
                    f"--output: cannot write {folder}: {exc.strerror or exc}"
                ) from None
            self.stderr.write(f"{fmt}: {stats.summary()} to {data} (card: {folder}/README.md)")
            return
        if target is None:
            self._to_stdout(rows)
        else:
            self._to_file(rows, target, fmt, parquet=parquet or target.suffix == ".parquet")
        self.stderr.write(f"{fmt}: {stats.summary()}")

    def _folder(self, output: str | None) -> Path | None:
        """The folder ``--output`` names (made if it ends in / and is missing), else None."""
        if output is None:
            return None
        path = Path(output)
        if path.is_dir():
            return path
        if not output.endswith(("/", os.sep)):
            return None
        if path.exists():
            raise CommandError(f"--output: {path} is a file, not a folder.")
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise CommandError(f"--output: cannot make {path}: {exc.strerror or exc}") from None
        return path

    def _to_stdout(self, rows: Iterable[ExportRow | bytes]) -> None:
        try:
            write_jsonl(rows, self.stdout)
            self.stdout.flush()
        except BrokenPipeError:
            # The reader left (``| head``): the way the Python docs give for SIGPIPE. Further
            # writes, including the interpreter's last flush, go to devnull; exit quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)

    def _to_file(
        self, rows: Iterable[ExportRow | bytes], output: Path, fmt: str, *, parquet: bool
    ) -> None:
        # Written beside the target and moved into place: a failed export leaves no
        # half-written file under the name a training job reads.
        partial = output.with_name(output.name + ".partial")
        try:
            if parquet:
                write_parquet(rows, partial, fmt)
            else:
                with partial.open("wb") as handle:
                    write_jsonl_bytes(rows, handle)
            partial.replace(output)
        except OSError as exc:
            raise CommandError(f"--output: cannot write {output}: {exc.strerror or exc}") from None
        finally:
            partial.unlink(missing_ok=True)
