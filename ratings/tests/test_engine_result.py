"""``rate`` returns a frozen ``RatingResult``; its ``to_dict()`` is the documented JSON."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from ratings.engine import (
    STYLE_ELEMENTS,
    Matrices,
    Method,
    ModelRating,
    Provisional,
    RatingResult,
    rate,
)
from ratings.tests.test_engine_bt import battles

RESULT_KEYS = [
    "models",
    "style_coefficients",
    "style_coefficient_intervals",
    "n_battles",
    "n_battles_input",
    "provisional",
    "method",
    "matrices",
    "online_elo",
    "position",
]
MODEL_KEYS = [
    "model",
    "rating",
    "rating_lower",
    "rating_upper",
    "rank",
    "votes",
    "preliminary",
    "rank_worst",
    "tier",
]
PROVISIONAL_KEYS = ["model", "battles", "wins", "losses", "ties", "reason"]
METHOD_KEYS = [
    "style_control",
    "ci",
    "rounds",
    "seed",
    "anchor",
    "reweight",
    "style_l2",
    "iterations",
    "gradient_max_norm",
    "degenerate_style_elements",
    "scale",
    "centre",
    "established_min_votes",
    "warnings",
    "position",
    "inverse_propensity",
]
POSITION_KEYS = ["coefficient", "standard_error", "interval"]
MATRIX_KEYS = ["models", "battle_counts", "win_fraction", "predicted_win_probability"]


def with_newcomer(style: bool) -> pd.DataFrame:
    """Five rated models and one that has only won (provisional, ``no_losses``)."""
    df = battles(n=300, p=5, style=style)
    newbie = pd.DataFrame({"model_a": ["newbie", "m1"], "model_b": ["m0", "newbie"]}).assign(
        winner=["model_a", "model_b"]
    )
    for column in set(df.columns) - set(newbie.columns):
        newbie[column] = [100, 200]
    return pd.concat([df, newbie], ignore_index=True)


@pytest.mark.parametrize(
    "options",
    [
        {"style_control": True},
        {"style_control": False, "with_online_elo": False},
        {"style_control": True, "ci": "bootstrap", "rounds": 5, "seed": 2, "anchor": ("m2", 1200)},
        {"style_control": True, "position": True},
    ],
)
def test_rate_returns_a_result_whose_dict_round_trips_through_json_with_the_documented_keys(
    options,
):
    result = rate(with_newcomer(options["style_control"]), **options)

    assert isinstance(result, RatingResult)
    assert isinstance(result.method, Method) and isinstance(result.matrices, Matrices)
    assert all(isinstance(m, ModelRating) for m in result.models)
    assert all(isinstance(e, Provisional) for e in result.provisional)
    data = result.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert list(data) == RESULT_KEYS
    assert [list(m) for m in data["models"]] == [MODEL_KEYS] * 5
    assert [list(e) for e in data["provisional"]] == [PROVISIONAL_KEYS]
    assert list(data["method"]) == METHOD_KEYS
    assert list(data["matrices"]) == MATRIX_KEYS
    if options["style_control"]:
        assert list(data["style_coefficients"]) == list(STYLE_ELEMENTS)
        assert list(data["style_coefficient_intervals"]) == list(STYLE_ELEMENTS)
    else:
        assert data["style_coefficients"] is None
        assert data["style_coefficient_intervals"] is None
    assert (data["online_elo"] is None) == (options.get("with_online_elo") is False)
    if options.get("position"):
        assert list(data["position"]) == POSITION_KEYS
    else:
        assert data["position"] is None


def test_the_dict_says_what_the_attributes_say():
    result = rate(with_newcomer(True), ci="bootstrap", rounds=5, seed=2, anchor=("m2", 1200))
    data = result.to_dict()

    assert [m["model"] for m in data["models"]] == [m.model for m in result.models]
    assert [m["rating"] for m in data["models"]] == [m.rating for m in result.models]
    assert [m["rank"] for m in data["models"]] == [m.rank for m in result.models]
    assert data["provisional"] == [
        {"model": "newbie", "battles": 2, "wins": 2, "losses": 0, "ties": 0, "reason": "no_losses"}
    ]
    assert result.provisional[0].reason == "no_losses"
    assert data["n_battles"] == result.n_battles == 300
    assert data["n_battles_input"] == result.n_battles_input == 302
    assert data["method"]["anchor"] == {"model": "m2", "rating": 1200.0}
    assert result.method.anchor == ("m2", 1200.0)
    assert (data["method"]["rounds"], data["method"]["seed"]) == (5, 2)
    assert data["method"]["scale"] == "400/ln(10) Elo points per logit"
    assert data["matrices"]["models"] == [m.model for m in result.models]
    for name, bounds in (result.style_intervals or {}).items():
        assert data["style_coefficient_intervals"][name] == (None if bounds is None else [*bounds])
    pinned = next(m for m in result.models if m.model == "m2")
    assert pinned.rating == pinned.rating_lower == pinned.rating_upper == 1200.0


def test_the_result_is_frozen():
    result = rate(battles(n=100, p=3, style=False), style_control=False)

    with pytest.raises(dataclasses.FrozenInstanceError):
        result.n_battles = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.models[0].rating = 0.0  # type: ignore[misc]
