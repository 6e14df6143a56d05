"""The fragility audit's cost against the refit it audits, on the same data in the same run.

    .venv/bin/python bench/fragility.py [--battles 200000] [--models 40] [--repeat 3]

For each data set the overall view is fitted as a snapshot fits it (``ratings.fits``: sandwich
intervals, the online Elo replay, the scale centred on the models with at least
``RATINGS_ESTABLISHED_MIN_VOTES`` votes), once without the audit and once with it
(``fragility_top=10``: the adjacent pairs of the top ten and the leader,
``ratings.engine.fragility``), each the median of ``--repeat`` runs. The audit's time is the
difference; the budget is the refit's own time again (ratio at most 1).

Data sets: the demo's 1,751 expert votes (``arena/demo_data``, style counts of the texts the
judges saw, as ``load_demo`` stores them), with and without style control; then seeded
synthetic battles (true ratings ~ N(0, 0.5) logits, 15% ties, style counts of the published
effect sizes) with style control, unless ``--battles 0``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.stability import demo_battles  # noqa: E402
from ratings import engine  # noqa: E402
from ratings.engine.data import STYLE_COLUMNS  # noqa: E402

TOP = 10


def synthetic(n: int, p: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    truth = rng.normal(0.0, 0.5, p)
    a = rng.integers(0, p, n)
    b = (a + rng.integers(1, p, n)) % p
    columns: dict[str, np.ndarray] = {}
    for high, (side_a, side_b) in zip((800, 4, 8, 10), STYLE_COLUMNS.values(), strict=True):
        columns[side_a] = rng.integers(0, high, n)
        columns[side_b] = rng.integers(0, high, n)
    length = list(STYLE_COLUMNS.values())[0]
    diff = (columns[length[0]] - columns[length[1]]) / (columns[length[0]] + columns[length[1]] + 1)
    prob = 1.0 / (1.0 + np.exp(-(truth[a] - truth[b] + 0.25 * diff)))
    u = rng.random(n)
    winner = np.where(u < 0.15, "tie", np.where(rng.random(n) < prob, "model_a", "model_b"))
    names = np.array([f"model-{i:03d}" for i in range(p)])
    return pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner, **columns})


def timed(frame: pd.DataFrame, style: bool, top: int, repeat: int) -> tuple[float, object]:
    times = []
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = engine.rate(
            frame,
            style_control=style,
            ci="sandwich",
            established_min_votes=engine.ESTABLISHED_MIN_VOTES,
            fragility_top=top,
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def row(label: str, frame: pd.DataFrame, style: bool, repeat: int) -> None:
    fit, _ = timed(frame, style, 0, repeat)
    both, result = timed(frame, style, TOP, repeat)
    audit = result.fragility  # type: ignore[attr-defined]
    first = audit.pairs[0] if audit and audit.pairs else None
    shown = "-"
    if first is not None:
        removal = first.removal.votes if first.removal else None
        flip = first.flip.votes if first.flip else None
        shown = f"#1/#2 removal<={removal} flip<={flip}"
    spent = max(both - fit, 0.0)
    print(
        f"{label:<34} {len(frame):>9} {fit:>8.3f} {spent:>8.3f} {spent / fit:>6.2f} "
        f"{audit.refits if audit else 0:>6}  {shown}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--battles", type=int, default=200_000)
    parser.add_argument("--models", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'data set':<34} {'battles':>9} {'refit s':>8} {'audit s':>8} {'ratio':>6} {'refits':>6}"
    )
    demo = engine.flatten_conv_metadata(demo_battles())
    row("demo votes, style control on", demo, True, args.repeat)
    row("demo votes, style control off", demo, False, args.repeat)
    if args.battles:
        frame = synthetic(args.battles, args.models)
        row(f"synthetic {args.models} models, style on", frame, True, args.repeat)
    print("\nratio = audit time / refit time (median runs); budget: at most 1.")


if __name__ == "__main__":
    main()
