"""Online Elo on real arena55k subsets reproduces the numbers published on exactly those rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ratings.engine import rate

DATA = Path(__file__).parent / "data" / "arena55k_subsets"

PUBLISHED = {
    "v402_commit_beb49c1": {
        "gpt-4-1106-preview": 1039,
        "gpt-4-0613": 1023,
        "vicuna-33b": 992,
        "llama-2-70b-chat": 986,
        "llama-2-7b-chat": 981,
        "vicuna-13b": 979,
    },
    "v85_commit_554ed02": {
        "gpt-4-1106-preview": 1025,
        "gpt-4-0314": 1014,
        "vicuna-33b": 990,
        "gpt-3.5-turbo-0613": 987,
        "vicuna-13b": 984,
    },
}


def load(folder: str) -> pd.DataFrame:
    raw = pd.read_csv(DATA / folder / "train_subset.csv")
    winner = np.select(
        [raw.winner_model_a == 1, raw.winner_model_b == 1], ["model_a", "model_b"], "tie"
    )
    return pd.DataFrame({"model_a": raw.model_a, "model_b": raw.model_b, "winner": winner})


@pytest.mark.parametrize("folder", sorted(PUBLISHED))
def test_online_elo_reproduces_the_published_ratings(folder):
    elo = rate(load(folder), style_control=False).online_elo
    rounded = {model: round(value) for model, value in elo.items()}
    for model, value in PUBLISHED[folder].items():
        assert rounded[model] == value


def test_online_elo_depends_on_battle_order():
    df = load("v85_commit_554ed02")
    forward = rate(df, style_control=False).online_elo
    backward = rate(df.iloc[::-1], style_control=False).online_elo
    assert forward != backward
