"""The ``rate`` command line: read a battle file, fit, print a leaderboard.

Shared by ``python manage.py rate`` (a thin wrapper) and ``python -m ratings.cli``; it imports
nothing from Django.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO, TypedDict

from ratings.csv_cells import neutralise
from ratings.engine.errors import EngineError
from ratings.engine.result import ESTABLISHED_MIN_VOTES

if TYPE_CHECKING:
    from ratings.engine import (
        MethodDict,
        ModelRatingDict,
        Provisional,
        ProvisionalDict,
        RatingResult,
    )

FORMATS = ("json", "csv", "table")
CSV_FIELDS = (
    "rank",
    "model",
    "rating",
    "rating_lower",
    "rating_upper",
    "votes",
    "rank_worst",
    "tier",
    "status",
    "battles",
    "wins",
    "losses",
    "ties",
    "reason",
)


def parse_anchor(text: str) -> tuple[str, float]:
    """``MODEL=RATING`` (the model name may itself contain '=')."""
    model, sep, rating = text.rpartition("=")
    try:
        if not sep or not model:
            raise ValueError
        return model, float(rating)
    except ValueError:
        raise EngineError(f"--anchor must look like MODEL=RATING, not {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "input", help="battles: .json, .jsonl, .csv or .parquet; - reads JSON Lines from stdin"
    )
    parser.add_argument(
        "--no-style-control",
        dest="style_control",
        action="store_false",
        help="plain Bradley-Terry, ignoring style counts",
    )
    parser.add_argument("--ci", choices=("sandwich", "bootstrap"), default="sandwich")
    parser.add_argument("--rounds", type=int, default=100, help="bootstrap rounds")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument("--anchor", help="pin one model's rating: MODEL=RATING")
    parser.add_argument(
        "--established-min-votes",
        type=int,
        default=ESTABLISHED_MIN_VOTES,
        help="rated votes a model needs to be ranked and to set the scale (their mean is 1000); "
        f"fewer and it is preliminary (default {ESTABLISHED_MIN_VOTES}; 0: every model)",
    )
    parser.add_argument("--reweight", action="store_true", help="inverse pair-frequency weights")
    parser.add_argument("--style-l2", type=float, default=0.0, help="L2 on style coefficients")
    parser.add_argument(
        "--streamed",
        action="store_true",
        help="Parquet only: fit batch by batch without holding the battles in memory "
        "(sandwich intervals; same ratings)",
    )
    parser.add_argument("--format", choices=FORMATS, default="json")
    parser.add_argument("--output", "-o", help="write here instead of standard output")


class PublicResult(TypedDict):
    """The JSON output, keys in this order."""

    models: list[ModelRatingDict]
    style_coefficients: dict[str, float | None] | None
    style_coefficient_intervals: dict[str, list[float] | None] | None
    n_battles: int
    n_battles_input: int
    method: MethodDict
    provisional: list[ProvisionalDict]


def _public(result: RatingResult) -> PublicResult:
    """The JSON output: the engine's result without the matrices and the online Elo."""
    data = result.to_dict()
    return {
        "models": data["models"],
        "style_coefficients": data["style_coefficients"],
        "style_coefficient_intervals": data["style_coefficient_intervals"],
        "n_battles": data["n_battles"],
        "n_battles_input": data["n_battles_input"],
        "method": data["method"],
        "provisional": data["provisional"],
    }


def _csv(result: RatingResult) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for rated in result.models:
        status = "preliminary" if rated.preliminary else "rated"
        writer.writerow({**rated.to_dict(), "model": neutralise(rated.model), "status": status})
    for entry in result.provisional:
        writer.writerow(
            {**entry.as_dict(), "model": neutralise(entry.model), "status": "provisional"}
        )
    return buffer.getvalue()


def _provisional_table(entries: Sequence[Provisional]) -> list[str]:
    width = max(len("model"), *(len(e.model) for e in entries))
    lines = [
        "",
        "provisional (needs more battles; not rated):",
        f"  {'model':<{width}}  {'battles':>7}  {'wins':>5}  {'losses':>6}  {'ties':>5}  reason",
    ]
    for e in entries:
        lines.append(
            f"  {e.model:<{width}}  {e.battles:>7}  {e.wins:>5}  {e.losses:>6}"
            f"  {e.ties:>5}  {e.reason}"
        )
    return lines


def render(result: RatingResult, fmt: str) -> str:
    """The result as JSON (the engine's keys, ``provisional`` included), CSV or a text table.

    CSV rows have ``status`` ``rated`` (rank, rating, interval, votes), ``preliminary`` (the
    same, fewer votes than ``--established-min-votes``) or ``provisional`` (battles, wins,
    losses, ties, reason); the table marks preliminary models and lists provisional ones below.
    """
    if fmt == "json":
        return json.dumps(_public(result), indent=2) + "\n"
    if fmt == "csv":
        return _csv(result)
    width = max(len("model"), *(len(m.model) for m in result.models))
    lines = [f"{'rank':>4}  {'model':<{width}}  {'rating':>8}  {'95% interval':>19}  {'votes':>7}"]
    for m in result.models:
        interval = f"{m.rating_lower:.1f} to {m.rating_upper:.1f}"
        lines.append(
            f"{m.rank:>4}  {m.model:<{width}}  {m.rating:>8.1f}  {interval:>19}  {m.votes:>7}"
            + ("  preliminary" if m.preliminary else "")
        )
    coefficients = result.style_coefficients
    if coefficients:
        intervals = result.style_intervals or {}
        lines.append("")
        lines.append("style coefficients (logit per standard deviation):")
        for name, value in coefficients.items():
            bounds = intervals.get(name)
            if value is None or bounds is None:
                lines.append(f"  {name:<7} n/a (no variation in the data)")
                continue
            lo, hi = bounds
            lines.append(f"  {name:<7} {value:+.4f}  ({lo:+.4f} to {hi:+.4f})")
    if result.provisional:
        lines.extend(_provisional_table(result.provisional))
    method = result.method
    lines.append("")
    lines.extend(f"warning: {text}" for text in method.warnings)
    unused = result.n_battles_input - result.n_battles
    lines.append(
        f"{result.n_battles} battles"
        + (f" ({unused} more with provisional models, not used)" if unused else "")
        + f", {method.ci} intervals, "
        f"style control {'on' if method.style_control else 'off'}"
    )
    return "\n".join(lines) + "\n"


def run(options: dict[str, Any], stdout: TextIO) -> RatingResult:
    """Do what the options say; errors are ``EngineError`` naming the row or column.

    Fewer than two ratable models raise ``CannotRateError`` naming the reason. The progress
    bar is drawn only when standard error is a terminal.
    """
    # The engine (numpy, pyarrow) and tqdm load here, not with the arguments: `--help` and
    # Django's loading of the `rate` command stay light.
    from tqdm import tqdm

    from ratings.engine import rate
    from ratings.engine.io import has_style_counts, read_battles

    fmt = options.get("format") or "json"
    if fmt not in FORMATS:
        raise EngineError(f"--format must be one of {', '.join(FORMATS)}")
    anchor = parse_anchor(options["anchor"]) if options.get("anchor") else None
    style_control = options.get("style_control", True)
    ci = options.get("ci") or "sandwich"
    rounds = int(options.get("rounds") or 100)
    if options.get("streamed"):
        result = _streamed(options, style_control=style_control, ci=ci, anchor=anchor)
        _write(render(result, fmt), options, stdout)
        return result
    df = read_battles(options["input"])
    if style_control and not has_style_counts(df):
        raise EngineError(
            f"{options['input']} has no style counts (conv_metadata or the flat count "
            "columns); rerun with --no-style-control to rate without style control"
        )
    bar = tqdm(
        total=rounds if ci == "bootstrap" else 1,
        desc="rating",
        unit="fit",
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
    )

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        result = rate(
            df,
            style_control=style_control,
            ci=ci,
            rounds=rounds,
            seed=int(options.get("seed") or 0),
            anchor=anchor,
            reweight=bool(options.get("reweight")),
            style_l2=float(options.get("style_l2") or 0.0),
            established_min_votes=_min_votes(options),
            progress=progress,
            with_online_elo=False,  # not part of the command's output; costs ~1 s per 1M battles
        )
    finally:
        bar.close()
    _write(render(result, fmt), options, stdout)
    return result


def _write(text: str, options: dict[str, Any], stdout: TextIO) -> None:
    if options.get("output"):
        try:
            with open(options["output"], "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise EngineError(f"cannot write {options['output']}: {exc.strerror or exc}") from exc
    else:
        stdout.write(text)


def _streamed(
    options: dict[str, Any], *, style_control: bool, ci: str, anchor: tuple[str, float] | None
) -> RatingResult:
    """``--streamed``: ``rate_parquet`` on a Parquet file (the bootstrap stays in memory)."""
    path = str(options["input"])
    if not path.lower().endswith((".parquet", ".pq")):
        raise EngineError("--streamed reads Parquet files only (.parquet, .pq)")
    if ci == "bootstrap":
        raise EngineError(
            "--streamed gives sandwich intervals: the bootstrap needs the battles in memory "
            "(drop --streamed)"
        )
    from ratings.engine import rate_parquet

    if style_control and os.path.exists(path):
        import pyarrow.parquet as pq

        from ratings.engine.io import FLAT_COLUMNS

        try:
            names = pq.read_schema(path).names
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported the same way
            raise EngineError(f"{path}: cannot read it ({exc})") from exc
        if "conv_metadata" not in names and not all(c in names for c in FLAT_COLUMNS):
            raise EngineError(
                f"{path} has no style counts (conv_metadata or the flat count columns); "
                "rerun with --no-style-control to rate without style control"
            )
    return rate_parquet(
        path,
        style_control=style_control,
        anchor=anchor,
        reweight=bool(options.get("reweight")),
        style_l2=float(options.get("style_l2") or 0.0),
        established_min_votes=_min_votes(options),
    )


def _min_votes(options: dict[str, Any]) -> int:
    value = options.get("established_min_votes")
    return ESTABLISHED_MIN_VOTES if value is None else int(value)


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m ratings.cli") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    add_arguments(parser)
    options = vars(parser.parse_args(argv))
    try:
        run(options, sys.stdout)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (e.g. ``| head``): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
