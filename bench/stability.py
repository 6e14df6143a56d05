"""Board stability on the demo's real votes: three votes for the least-voted model.

    .venv/bin/python bench/stability.py

Reads the demo's expert votes (``arena/demo_data``, the battles ``load_demo`` writes, with the
style counts of the texts the judges saw), fits the overall view with style control, then adds
three votes for the demo model with the fewest (a model of the pool with none, when there is
one): a win against the top-rated model, a tie with the second, a win against the third. It
prints, for the scale centred on the mean of every rated model (``established_min_votes=0``,
the old transform) and on the mean of the established models (``RATINGS_ESTABLISHED_MIN_VOTES``,
50 by default), the largest move of a model with 100 or more votes and the newcomer's rating,
interval and rank, and the best rank among models with 500 or more votes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

import django  # noqa: E402

django.setup()

import pandas as pd  # noqa: E402

from answer_style import conv_metadata, style_counts  # noqa: E402
from arena.services.demo import DEMO_DATA_DIR, _history_battles  # noqa: E402
from ratings import engine  # noqa: E402

NEWCOMER_OUTCOMES = ("model_a", "tie", "model_a")  # win, tie, win, the newcomer as model_a


def demo_battles() -> pd.DataFrame:
    """The demo's expert votes as ``load_demo`` stores them: models, verdict, style counts."""
    history, _ = _history_battles(DEMO_DATA_DIR)
    rows = []
    for b in history:
        a = [style_counts(text) for text in b["a"]]
        c = [style_counts(text) for text in b["b"]]
        rows.append(
            {
                "model_a": b["model_a"],
                "model_b": b["model_b"],
                "winner": b["winner"],
                "conv_metadata": conv_metadata(a, c),
            }
        )
    return pd.DataFrame(rows)


def least_voted(battles: pd.DataFrame) -> str:
    """The demo model with the fewest votes (pool models without votes count as 0)."""
    meta = json.loads((DEMO_DATA_DIR / "models.json").read_text())
    names = sorted({k for k in meta if not k.startswith("_")} | set(battles["model_a"]))
    counts = pd.concat([battles["model_a"], battles["model_b"]]).value_counts()
    return min(names, key=lambda m: (int(counts.get(m, 0)), m))


def with_newcomer(battles: pd.DataFrame, newcomer: str, top: list[str]) -> pd.DataFrame:
    """Three votes for ``newcomer`` against the three top-rated models; style counts copied
    from the first battles so the style-controlled view keeps them."""
    extra = battles.head(3).copy()
    extra["model_a"] = newcomer
    extra["model_b"] = [m for m in top[:3] if m != newcomer][:3]
    extra["winner"] = list(NEWCOMER_OUTCOMES)
    return pd.concat([battles[battles["model_a"] != newcomer], extra], ignore_index=True)


def fit(battles: pd.DataFrame, min_votes: int) -> engine.RatingResult:
    frame = engine.flatten_conv_metadata(battles[["model_a", "model_b", "winner", "conv_metadata"]])
    return engine.rate(frame, established_min_votes=min_votes, with_online_elo=False)


def main() -> None:
    battles = demo_battles()
    newcomer = least_voted(battles)
    before_all = fit(battles, 0)
    top = [m.model for m in before_all.models]
    after_battles = with_newcomer(battles, newcomer, top)
    print(f"{len(battles)} demo votes; newcomer {newcomer!r} gets {', '.join(NEWCOMER_OUTCOMES)}")
    print(f"  against {', '.join(after_battles['model_b'].tail(3))}")
    for label, min_votes in (
        ("mean of all models (old)", 0),
        (
            f"established mean (>= {engine.ESTABLISHED_MIN_VOTES} votes)",
            engine.ESTABLISHED_MIN_VOTES,
        ),
    ):
        before = {m.model: m for m in fit(battles, min_votes).models}
        after = fit(after_battles, min_votes)
        moves = {
            m.model: abs(m.rating - before[m.model].rating)
            for m in after.models
            if m.model in before and m.votes >= 100
        }
        worst = max(moves, key=moves.__getitem__)
        new = next(m for m in after.models if m.model == newcomer)
        big = [m.rank for m in after.models if m.votes >= 500 and m.model != newcomer]
        print(f"\n{label}:")
        print(f"  largest move of a model with >= 100 votes: {moves[worst]:.1f} ({worst})")
        print(
            f"  newcomer: {new.rating:.1f} ({new.rating_lower:.0f} to {new.rating_upper:.0f}), "
            f"rank {new.rank}{' preliminary' if new.preliminary else ''}; "
            f"best rank of a model with >= 500 votes: {min(big)}"
        )
        if after.method.warnings:
            print(f"  warnings: {'; '.join(after.method.warnings)}")


if __name__ == "__main__":
    main()
