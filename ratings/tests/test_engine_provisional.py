"""The rated set and the provisional models: the leaderboard never blanks on a split graph."""

from __future__ import annotations

import pandas as pd
import pytest

from answer_style import STYLE_COLUMNS
from ratings.engine import CannotRateError, EngineError
from ratings.engine import rate as engine_rate
from ratings.engine.provisional import PROVISIONAL_REASONS, Provisional

from .test_engine_bt import battles


def rate(df, **options):
    """The engine's result in its JSON form (``RatingResult.to_dict()``), which these tests pin."""
    return engine_rate(df, **options).to_dict()


STYLE = [column for pair in STYLE_COLUMNS.values() for column in pair]


def games(rows: list[tuple[str, str, str]], style: bool = False) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["model_a", "model_b", "winner"])
    if style:
        for i, column in enumerate(STYLE):
            df[column] = [(7 * k + 3 * i) % 11 + 1 for k in range(len(df))]
    return df


def round_robin(names: list[str], times: int = 2) -> list[tuple[str, str, str]]:
    """Every pair meets ``times`` times each way, each side winning once: all connected."""
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for _ in range(times):
                rows += [(a, b, "model_a"), (a, b, "model_b")]
    return rows


def provisional(result: dict) -> dict[str, dict]:
    return {entry["model"]: entry for entry in result["provisional"]}


@pytest.mark.parametrize("style", [True, False])
def test_a_new_model_that_wins_its_first_three_battles_is_provisional_and_the_rest_unchanged(
    style,
):
    before = battles(n=300, p=5, style=style)
    newbie = pd.DataFrame(
        {"model_a": ["m0", "newbie", "m3"], "model_b": ["newbie", "m1", "newbie"]}
    ).assign(winner=["model_b", "model_a", "model_b"])
    if style:
        for column in STYLE:
            newbie[column] = [40, 90, 12]
    after = pd.concat([before, newbie], ignore_index=True)

    without = rate(before, style_control=style)
    with_new = rate(after, style_control=style)

    assert with_new["models"] == without["models"]  # identical, not approximately equal
    assert with_new["style_coefficients"] == without["style_coefficients"]
    assert with_new["provisional"] == [
        {"model": "newbie", "battles": 3, "wins": 3, "losses": 0, "ties": 0, "reason": "no_losses"}
    ]
    assert with_new["n_battles"] == 300 and with_new["n_battles_input"] == 303


def test_two_groups_that_never_met_rate_the_larger_and_list_the_other_not_connected():
    df = games(round_robin(["a1", "a2", "a3"]) + round_robin(["live-x", "live-y"], times=3))

    result = rate(df, style_control=False)

    assert sorted(m["model"] for m in result["models"]) == ["a1", "a2", "a3"]
    assert provisional(result) == {
        "live-x": {
            "model": "live-x",
            "battles": 6,
            "wins": 3,
            "losses": 3,
            "ties": 0,
            "reason": "not_connected",
        },
        "live-y": {
            "model": "live-y",
            "battles": 6,
            "wins": 3,
            "losses": 3,
            "ties": 0,
            "reason": "not_connected",
        },
    }
    assert result["n_battles"] == 12 and result["n_battles_input"] == 18
    assert result["matrices"]["models"] == [m["model"] for m in result["models"]]


def test_groups_of_equal_size_go_to_the_one_with_more_battles_then_to_the_first_name():
    more = games(round_robin(["b1", "b2"], times=2) + round_robin(["a1", "a2"], times=1))
    assert sorted(m["model"] for m in rate(more, style_control=False)["models"]) == ["b1", "b2"]

    equal = games(round_robin(["b1", "b2"]) + round_robin(["a1", "a2"]))
    result = rate(equal, style_control=False)
    assert sorted(m["model"] for m in result["models"]) == ["a1", "a2"]
    assert {e["reason"] for e in result["provisional"]} == {"not_connected"}
    # The input order does not change the choice.
    again = rate(equal.iloc[::-1].reset_index(drop=True), style_control=False)
    assert sorted(m["model"] for m in again["models"]) == ["a1", "a2"]


def test_a_model_with_only_losses_is_provisional_no_wins():
    df = games(
        round_robin(["a", "b", "c"]) + [("a", "loser", "model_a"), ("loser", "c", "model_b")]
    )

    result = rate(df, style_control=False)

    assert provisional(result)["loser"] == {
        "model": "loser",
        "battles": 2,
        "wins": 0,
        "losses": 2,
        "ties": 0,
        "reason": "no_wins",
    }


def test_a_tie_counts_both_ways_so_a_model_with_a_win_and_a_tie_is_rated():
    df = games(round_robin(["a", "b", "c"]) + [("new", "a", "model_a"), ("new", "b", "tie")])

    result = rate(df, style_control=False)

    assert "new" in [m["model"] for m in result["models"]]
    assert result["provisional"] == []


def test_a_model_that_reaches_the_rated_set_only_through_a_provisional_one_is_no_losses():
    # n1 beat n2, n2 beat a: both scored against the rated set (n1 through n2), neither lost.
    df = games(round_robin(["a", "b", "c"]) + [("n1", "n2", "model_a"), ("n2", "a", "model_a")])

    entries = provisional(rate(df, style_control=False))

    assert entries["n1"]["reason"] == "no_losses" and entries["n1"]["battles"] == 1
    assert entries["n2"]["reason"] == "no_losses"
    assert (entries["n2"]["wins"], entries["n2"]["losses"]) == (1, 1)


def test_provisional_models_are_listed_most_battles_first_then_by_name():
    df = games(
        round_robin(["a", "b", "c"])
        + [("z", "a", "model_a")] * 2
        + [("y", "a", "model_a"), ("x", "b", "model_b")]
    )

    result = rate(df, style_control=False)

    assert [e["model"] for e in result["provisional"]] == ["z", "x", "y"]
    assert {e["reason"] for e in result["provisional"]} <= set(PROVISIONAL_REASONS)


def test_fewer_than_two_ratable_models_raise_cannot_rate_with_everyone_listed():
    df = games([("a", "b", "model_a")] * 3 + [("b", "c", "model_a")])

    with pytest.raises(CannotRateError, match="no two models can be rated") as info:
        rate(df, style_control=False)

    assert isinstance(info.value, EngineError)
    assert {e.model for e in info.value.provisional} == {"a", "b", "c"}
    assert all(isinstance(e, Provisional) for e in info.value.provisional)
    by_model = {e.model: e for e in info.value.provisional}
    assert by_model["a"].reason == "no_losses" and by_model["a"].wins == 3
    assert by_model["c"].reason == "no_wins"
    assert "no_losses: a" in str(info.value)


def test_bootstrap_intervals_are_computed_on_the_rated_set():
    df = games(round_robin(["a", "b", "c"], times=6) + [("new", "a", "model_a")], style=True)

    result = rate(df, ci="bootstrap", rounds=5, seed=1)

    assert [e["model"] for e in result["provisional"]] == ["new"]
    assert len(result["models"]) == 3
    for m in result["models"]:
        assert m["rating_lower"] <= m["rating"] <= m["rating_upper"]


def test_an_anchor_on_a_provisional_model_is_refused_with_the_reason():
    df = games(round_robin(["a", "b", "c"]) + [("new", "a", "model_a")])

    with pytest.raises(EngineError, match=r"'new' is provisional \(no_losses\)"):
        rate(df, style_control=False, anchor=("new", 1200.0))


def test_a_chain_with_no_cycle_lists_everyone_with_reasons_from_the_single_model_set():
    # a beat b, c beat a: no two models can be rated. The chosen single-model set is {a}
    # (every set has one model and no battles inside, so the first name wins); a, which both
    # won and lost, takes its reason from its record: not_connected.
    df = games([("a", "b", "model_a"), ("c", "a", "model_a")])

    with pytest.raises(CannotRateError) as info:
        rate(df, style_control=False)

    assert {e.model: e.as_dict() for e in info.value.provisional} == {
        "a": {
            "model": "a",
            "battles": 2,
            "wins": 1,
            "losses": 1,
            "ties": 0,
            "reason": "not_connected",
        },
        "b": {"model": "b", "battles": 1, "wins": 0, "losses": 1, "ties": 0, "reason": "no_wins"},
        "c": {"model": "c", "battles": 1, "wins": 1, "losses": 0, "ties": 0, "reason": "no_losses"},
    }


def test_the_single_model_set_takes_no_wins_from_a_record_of_losses_only():
    df = games([("b", "a", "model_a"), ("b", "c", "model_a")])

    with pytest.raises(CannotRateError) as info:
        rate(df, style_control=False)

    by_model = {e.model: e.reason for e in info.value.provisional}
    assert by_model == {"a": "no_wins", "b": "no_losses", "c": "no_wins"}


def test_the_refusal_names_at_most_five_models_per_reason_and_says_there_are_others():
    losers = ["b", "c", "d", "e", "f", "g"]
    df = games([("a", loser, "model_a") for loser in losers])

    with pytest.raises(CannotRateError) as info:
        rate(df, style_control=False)

    assert str(info.value) == (
        "no two models can be rated: maximum-likelihood ratings need models that have each "
        "beaten and lost to the others, directly or through others (a tie counts as both); "
        "no_losses: a; no_wins: b, c, d, e, f and others"
    )


def test_ties_on_either_side_are_counted_in_a_provisional_models_record():
    # x and y only tied each other, once on each side: a pair apart from the rated three.
    df = games(round_robin(["a1", "a2", "a3"]) + [("x", "y", "tie"), ("y", "x", "tie (bothbad)")])

    entries = provisional(rate(df, style_control=False))

    for model in ("x", "y"):
        assert entries[model] == {
            "model": model,
            "battles": 2,
            "wins": 0,
            "losses": 0,
            "ties": 2,
            "reason": "not_connected",
        }
