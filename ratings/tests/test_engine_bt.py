"""The Bradley-Terry fit against statsmodels and against its own invariances."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from hypothesis import given, settings
from hypothesis import strategies as st

from ratings.engine import EngineError, bt, data, flatten_conv_metadata, upper_bound_ranks
from ratings.engine import rate as engine_rate


def rate(df, **options):
    """The engine's result in its JSON form (``RatingResult.to_dict()``), which these tests pin."""
    return engine_rate(df, **options).to_dict()


SCALE = 400 / math.log(10)
WINNERS = ["model_a", "model_b", "tie", "tie (bothbad)"]


def battles(n: int = 300, p: int = 5, seed: int = 1, style: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, p, n)
    b = (a + rng.integers(1, p, n)) % p
    truth = np.linspace(-1, 1, p)
    tok_a, tok_b = rng.integers(10, 1000, n), rng.integers(10, 1000, n)
    z = truth[a] - truth[b] + 0.6 * (tok_a - tok_b) / (tok_a + tok_b + 1)
    u = rng.random(n)
    prob = 1 / (1 + np.exp(-z))
    winner = np.where(
        u < 0.8 * prob,
        "model_a",
        np.where(u < 0.8, "model_b", np.where(u < 0.9, "tie", "tie (bothbad)")),
    )
    df = pd.DataFrame(
        {"model_a": [f"m{i}" for i in a], "model_b": [f"m{i}" for i in b], "winner": winner}
    )
    if style:
        counts = rng.integers(0, 6, (6, n))
        df["sum_assistant_a_tokens"], df["sum_assistant_b_tokens"] = tok_a, tok_b
        df["header_count_a"], df["header_count_b"] = counts[0], counts[1]
        df["list_count_a"], df["list_count_b"] = counts[2], counts[3]
        df["bold_count_a"], df["bold_count_b"] = counts[4], counts[5]
    return df


def statsmodels_fit(df: pd.DataFrame, style: bool):
    """Logit on the explicit design: +1/-1 model columns (first model dropped), z-scored style."""
    models = sorted(set(df.model_a) | set(df.model_b))
    index = {m: i for i, m in enumerate(models)}
    n, p = len(df), len(models)
    x = np.zeros((n, p))
    x[np.arange(n), df.model_a.map(index)] = 1
    x[np.arange(n), df.model_b.map(index)] = -1
    columns = [x[:, 1:]]
    if style:
        raw, _ = data.style_differences(df)
        columns.append(((raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)).T)
    y = df.winner.map(data.OUTCOMES).to_numpy()
    result = sm.Logit(y, np.column_stack(columns)).fit(disp=0, method="newton", tol=1e-12)
    robust = sm.Logit(y, np.column_stack(columns)).fit(
        disp=0, method="newton", tol=1e-12, cov_type="HC0"
    )
    return models, result, robust


def centred_ratings(models, params, cov):
    p = len(models)
    theta = np.r_[0.0, params[: p - 1]]
    full = np.zeros((len(params) + 1, len(params) + 1))
    full[1:, 1:] = cov
    centre = np.eye(p) - 1.0 / p
    rating = 1000 + SCALE * centre @ theta
    se = SCALE * np.sqrt(np.diag(centre @ full[:p, :p] @ centre.T))
    return dict(zip(models, rating, strict=True)), dict(zip(models, se, strict=True))


@pytest.mark.parametrize("style", [False, True])
def test_ratings_and_sandwich_intervals_equal_statsmodels_logit_hc0(style):
    df = battles(style=style)
    models, _, robust = statsmodels_fit(df, style)
    expected, se = centred_ratings(models, robust.params, robust.cov_params())
    result = rate(df, style_control=style)
    for row in result["models"]:
        assert row["rating"] == pytest.approx(expected[row["model"]], abs=1e-7)
        half_width = (row["rating_upper"] - row["rating_lower"]) / 2
        assert half_width == pytest.approx(1.959963984540054 * se[row["model"]], rel=1e-7)
    if style:
        p = len(models)
        coefficients = result["style_coefficients"]
        robust_se = np.sqrt(np.diag(robust.cov_params()))[p - 1 :]
        for j, name in enumerate(data.STYLE_ELEMENTS):
            assert coefficients[name] == pytest.approx(robust.params[p - 1 + j], abs=1e-9)
            lo, hi = result["style_coefficient_intervals"][name]
            assert (hi - lo) / 2 == pytest.approx(1.959963984540054 * robust_se[j], rel=1e-7)
    else:
        assert result["style_coefficients"] is None


def test_fit_stops_only_when_the_gradient_max_norm_is_below_1e_minus_8():
    result = rate(battles(n=2000, p=8))
    assert result["method"]["gradient_max_norm"] < 1e-8
    assert result["method"]["iterations"] >= 2


def test_mean_rating_is_1000_without_an_anchor():
    ratings = [m["rating"] for m in rate(battles())["models"]]
    assert np.mean(ratings) == pytest.approx(1000, abs=1e-9)


def test_anchor_pins_the_model_and_keeps_rating_differences():
    df = battles()
    free = {m["model"]: m for m in rate(df)["models"]}
    pinned = {m["model"]: m for m in rate(df, anchor=("m2", 1200.0))["models"]}
    assert pinned["m2"]["rating"] == 1200.0
    assert pinned["m2"]["rating_lower"] == pytest.approx(1200.0)
    shift = 1200.0 - free["m2"]["rating"]
    for name, row in free.items():
        assert pinned[name]["rating"] == pytest.approx(row["rating"] + shift, abs=1e-9)


def test_reweighted_fit_equals_statsmodels_glm_with_the_same_weights():
    df = battles(n=400, p=4, style=False)
    result = rate(df, style_control=False, reweight=True)
    models = sorted(set(df.model_a) | set(df.model_b))
    index = {m: i for i, m in enumerate(models)}
    pair = [tuple(sorted((a, b))) for a, b in zip(df.model_a, df.model_b, strict=True)]
    count = pd.Series(pair).map(pd.Series(pair).value_counts()).to_numpy()
    weight = 1 / np.maximum(count, 50)
    x = np.zeros((len(df), len(models)))
    x[np.arange(len(df)), df.model_a.map(index)] = 1
    x[np.arange(len(df)), df.model_b.map(index)] = -1
    y = df.winner.map(data.OUTCOMES).to_numpy()
    glm = sm.GLM(y, x[:, 1:], family=sm.families.Binomial(), var_weights=weight).fit(tol=1e-13)
    expected, _ = centred_ratings(models, glm.params, np.zeros((3, 3)))
    for row in result["models"]:
        assert row["rating"] == pytest.approx(expected[row["model"]], abs=1e-6)


def test_style_l2_solution_zeroes_the_penalised_gradient_of_the_mean_loss():
    df = battles(n=500)
    l2 = 0.05
    result = rate(df, style_l2=l2)
    models = [m["model"] for m in result["models"]]
    ratings = {m["model"]: (m["rating"] - 1000) / SCALE for m in result["models"]}
    raw, _ = data.style_differences(df)
    f = ((raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)).T
    beta = np.array([result["style_coefficients"][k] for k in data.STYLE_ELEMENTS])
    z = df.model_a.map(ratings).to_numpy() - df.model_b.map(ratings).to_numpy() + f @ beta
    resid = df.winner.map(data.OUTCOMES).to_numpy() - 1 / (1 + np.exp(-z))
    assert np.abs(f.T @ resid / len(df) - l2 * beta).max() < 1e-10
    unpenalised = rate(df)["style_coefficients"]
    assert abs(result["style_coefficients"]["length"]) < abs(unpenalised["length"])
    assert len(models) == 5


def identified_battles(extra: list[tuple[int, int, int]], p: int) -> pd.DataFrame:
    """Every pair met with one win each way (so the MLE exists), plus ``extra`` battles."""
    rows = [(i, j, w) for i in range(p) for j in range(i + 1, p) for w in (0, 1)]
    rows += [(a, (a + d) % p, w) for a, d, w in extra]
    return pd.DataFrame(
        {
            "model_a": [f"m{a}" for a, _, _ in rows],
            "model_b": [f"m{b}" for _, b, _ in rows],
            "winner": [WINNERS[w] for _, _, w in rows],
        }
    )


extra_battles = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 3)), max_size=40
)


@settings(max_examples=40, deadline=None)
@given(extra=extra_battles, swap=st.lists(st.booleans(), min_size=52, max_size=52))
def test_swapping_sides_with_the_winner_leaves_ratings_unchanged(extra, swap):
    df = identified_battles(extra, 4)
    mask = np.array(swap[: len(df)])
    swapped = df.copy()
    swapped.loc[mask, "model_a"] = df.loc[mask, "model_b"]
    swapped.loc[mask, "model_b"] = df.loc[mask, "model_a"]
    flip = {"model_a": "model_b", "model_b": "model_a", "tie": "tie", "tie (bothbad)": "tie"}
    swapped.loc[mask, "winner"] = df.loc[mask, "winner"].map(flip)
    before = {m["model"]: m for m in rate(df, style_control=False)["models"]}
    after = {m["model"]: m for m in rate(swapped, style_control=False)["models"]}
    for name, row in before.items():
        assert after[name]["rating"] == pytest.approx(row["rating"], abs=1e-5)
        assert after[name]["rating_upper"] == pytest.approx(row["rating_upper"], abs=1e-5)


def test_swapping_every_battle_with_style_counts_leaves_ratings_and_coefficients_unchanged():
    df = battles()
    swapped = df.rename(
        columns={
            "model_a": "model_b",
            "model_b": "model_a",
            **{a: b for pair in data.STYLE_COLUMNS.values() for a, b in (pair, pair[::-1])},
        }
    )
    swapped["winner"] = df.winner.map({"model_a": "model_b", "model_b": "model_a"}).fillna(
        df.winner
    )
    before, after = rate(df), rate(swapped)
    assert [m["model"] for m in before["models"]] == [m["model"] for m in after["models"]]
    for x, y in zip(before["models"], after["models"], strict=True):
        assert y["rating"] == pytest.approx(x["rating"], abs=1e-5)
    for name, value in before["style_coefficients"].items():
        assert after["style_coefficients"][name] == pytest.approx(value, abs=1e-8)


@settings(max_examples=25, deadline=None)
@given(extra=extra_battles)
def test_doubling_the_data_narrows_sandwich_intervals_by_one_over_root_two(extra):
    df = identified_battles(extra, 4)
    once = {m["model"]: m for m in rate(df, style_control=False)["models"]}
    twice = {m["model"]: m for m in rate(pd.concat([df, df]), style_control=False)["models"]}
    for name, row in once.items():
        width = row["rating_upper"] - row["rating_lower"]
        # Both fits stop at gradient max-norm < 1e-8, i.e. within ~1e-6 Elo of the optimum.
        assert twice[name]["rating"] == pytest.approx(row["rating"], abs=1e-5)
        doubled = twice[name]["rating_upper"] - twice[name]["rating_lower"]
        assert doubled == pytest.approx(width / math.sqrt(2), rel=1e-5)


def test_rank_counts_models_whose_lower_bound_is_above_the_upper_bound():
    lower = np.array([10.0, 8.0, 1.0, 0.5])
    upper = np.array([12.0, 11.0, 9.0, 2.0])
    assert upper_bound_ranks(lower, upper) == [1, 1, 2, 3]


def test_votes_and_matrices_count_each_battle_once_per_side():
    df = battles(n=200, p=4, style=False)
    result = rate(df, style_control=False)
    order = result["matrices"]["models"]
    counts = np.array(result["matrices"]["battle_counts"])
    assert (counts == counts.T).all()
    expected_votes = pd.concat([df.model_a, df.model_b]).value_counts()
    for i, row in enumerate(result["models"]):
        assert row["model"] == order[i]
        assert row["votes"] == expected_votes[row["model"]] == counts[i].sum()
    wins = np.array(result["matrices"]["win_fraction"], dtype=float)
    off = ~np.eye(len(order), dtype=bool) & (counts > 0)
    assert np.allclose((wins + wins.T)[off], 1.0)
    predicted = np.array(result["matrices"]["predicted_win_probability"])
    assert np.allclose(predicted + predicted.T, 1.0)
    assert predicted[0, -1] > 0.5


def test_models_are_sorted_by_rating_descending():
    ratings = [m["rating"] for m in rate(battles())["models"]]
    assert ratings == sorted(ratings, reverse=True)


def test_unknown_winner_names_the_first_offending_row():
    df = battles(n=50, style=False)
    df.loc[7, "winner"] = "draw"
    df.loc[9, "winner"] = "nobody"
    with pytest.raises(EngineError, match="row 7") as info:
        rate(df, style_control=False)
    assert info.value.row == 7 and info.value.column == "winner"


def test_missing_style_column_is_named():
    df = battles(n=50).drop(columns=["bold_count_b"])
    with pytest.raises(EngineError, match="bold_count_b") as info:
        rate(df)
    assert info.value.column == "bold_count_b"


def test_missing_winner_column_is_named():
    with pytest.raises(EngineError, match="winner"):
        rate(battles(n=20).drop(columns=["winner"]), style_control=False)


def test_a_single_model_is_refused():
    df = pd.DataFrame({"model_a": ["x"], "model_b": ["x"], "winner": ["tie"]})
    with pytest.raises(EngineError, match="same model|at least 2"):
        rate(df, style_control=False)


def test_a_model_that_won_every_battle_has_no_finite_rating_and_is_listed_provisional():
    df = identified_battles([], 3)
    df = pd.concat(
        [df, pd.DataFrame({"model_a": ["champ"] * 3, "model_b": ["m0"] * 3, "winner": "model_a"})]
    )
    result = rate(df, style_control=False)
    assert "champ" not in [m["model"] for m in result["models"]]
    assert [(e["model"], e["reason"]) for e in result["provisional"]] == [("champ", "no_losses")]


def test_a_style_element_that_never_varies_is_reported_as_null():
    df = battles()
    df["bold_count_a"] = 0
    df["bold_count_b"] = 0
    result = rate(df)
    assert result["style_coefficients"]["bold"] is None
    assert result["method"]["degenerate_style_elements"] == ["bold"]
    assert result["style_coefficients"]["length"] is not None


def test_bootstrap_is_reproducible_for_a_seed_and_changes_with_it():
    df = battles(n=400)
    first = rate(df, ci="bootstrap", rounds=30, seed=3)
    again = rate(df, ci="bootstrap", rounds=30, seed=3)
    other = rate(df, ci="bootstrap", rounds=30, seed=4)
    assert first["models"] == again["models"]
    assert first["models"] != other["models"]
    for row in first["models"]:
        assert row["rating_lower"] < row["rating"] < row["rating_upper"]


def test_bootstrap_intervals_do_not_depend_on_the_worker_count():
    df = battles(n=400)
    one = rate(df, ci="bootstrap", rounds=20, seed=5, workers=1)
    three = rate(df, ci="bootstrap", rounds=20, seed=5, workers=3)
    assert one["models"] == three["models"]
    assert one["style_coefficient_intervals"] == three["style_coefficient_intervals"]
    with pytest.raises(EngineError, match="workers"):
        rate(df, ci="bootstrap", rounds=20, workers=0)


def test_bootstrap_and_sandwich_intervals_agree_on_plenty_of_data():
    df = battles(n=6000, p=5, seed=7)
    sandwich = {m["model"]: m for m in rate(df)["models"]}
    boot = {m["model"]: m for m in rate(df, ci="bootstrap", rounds=200, seed=1)["models"]}
    for name, row in sandwich.items():
        width = row["rating_upper"] - row["rating_lower"]
        boot_width = boot[name]["rating_upper"] - boot[name]["rating_lower"]
        assert boot_width == pytest.approx(width, rel=0.25)


@pytest.mark.parametrize(("reweight", "style_l2"), [(False, 0.0), (True, 0.0), (False, 0.05)])
def test_fast_bootstrap_replicate_equals_an_exact_refit_of_the_same_resample(reweight, style_l2):
    df = battles(n=20000, p=12, seed=5)
    encoded = data.encode(df, style_control=True, reweight=reweight)
    rows = bt.rows_from_battles(encoded, style_l2)
    full = bt.fit(rows)
    boot = bt._boot_data(rows, full)
    theta, iterations = bt._fast_replicate(rows, boot, full, np.random.default_rng(11))
    # On this much data the float32 iteration gets there itself (the exact fit that finishes a
    # replicate not done in 12 steps would hide a wrong iteration behind a correct result).
    assert iterations < 12
    counts = bt._poisson_counts(np.random.default_rng(11), len(rows.y))
    exact = bt.fit(bt._weighted(rows, counts), theta0=full.theta).theta
    p = rows.n_models
    diff = theta - exact
    # BOOT_TOL is 3e-5 logits (0.005 Elo points).
    assert np.abs(SCALE * (diff[:p] - diff[:p].mean())).max() < 0.01
    assert np.abs(diff[p:]).max() < 6e-5


@pytest.mark.parametrize("reweight", [False, True])
def test_grouped_bootstrap_replicate_is_a_multinomial_resample_of_the_battles(reweight):
    """Without style a replicate draws n battles with replacement over the grouped rows; its
    fit equals the fit of the same counts put on the full rows (rows drawn 0 times weigh 0).
    m0 and m1 meet far more often than the rest, so the inverse pair-frequency weights vary."""
    df = pd.concat(
        [battles(n=400, p=5, seed=2, style=False), battles(n=300, p=2, seed=3, style=False)],
        ignore_index=True,
    )
    encoded = data.encode(df, style_control=False, reweight=reweight)
    assert (encoded.pair_weight is not None) == reweight
    if reweight:
        assert encoded.pair_weight.max() > 2 * encoded.pair_weight.min()
    rows = bt.rows_from_battles(encoded, 0.0)
    full = bt.fit(rows)
    counts = np.random.default_rng(11).multinomial(
        encoded.n_battles, encoded.mult / encoded.n_battles
    )
    assert counts.sum() == encoded.n_battles and (counts == 0).any()
    w = 1.0 if encoded.pair_weight is None else encoded.pair_weight[encoded.row_pair]
    expected = bt.fit(dataclasses.replace(rows, c=counts * w, c2=counts * w * w))

    sample = bt._resample(rows, encoded, np.random.default_rng(11))
    theta, _ = bt._grouped_replicate(rows, encoded, full, np.random.default_rng(11))

    assert sample.c.sum() == pytest.approx(float((counts * w).sum()))
    assert sample.c2.sum() == pytest.approx(float((counts * w * w).sum()))
    assert np.abs(bt.fit(sample).theta - expected.theta).max() < 1e-9
    assert np.abs(theta - expected.theta).max() < 1e-9
    assert np.allclose(
        bt.sandwich(sample, bt.fit(sample)),
        bt.sandwich(dataclasses.replace(rows, c=counts * w, c2=counts * w * w), expected),
    )


def test_grouped_bootstrap_and_sandwich_intervals_agree_on_plenty_of_data():
    df = battles(n=6000, p=5, seed=7, style=False)
    sandwich = {m["model"]: m for m in rate(df, style_control=False)["models"]}
    boot = rate(df, style_control=False, ci="bootstrap", rounds=200, seed=1)
    for row in boot["models"]:
        width = sandwich[row["model"]]["rating_upper"] - sandwich[row["model"]]["rating_lower"]
        assert row["rating_upper"] - row["rating_lower"] == pytest.approx(width, rel=0.25)


def test_poisson_counts_have_mean_and_variance_one():
    counts = bt._poisson_counts(np.random.default_rng(0), 400_000)
    assert counts.mean() == pytest.approx(1.0, abs=0.01)
    assert counts.var() == pytest.approx(1.0, abs=0.01)
    assert (counts == 0).mean() == pytest.approx(math.exp(-1), abs=0.005)


def test_flatten_conv_metadata_sums_the_nested_counts():
    meta = {
        "sum_assistant_a_tokens": 10,
        "sum_assistant_b_tokens": 20,
        "header_count_a": {"h1": 1, "h2": 2, "h3": 0, "h4": 0, "h5": 0, "h6": 1},
        "header_count_b": {"h1": 0, "h2": 0, "h3": 0, "h4": 0, "h5": 0, "h6": 0},
        "list_count_a": {"ordered": 3, "unordered": 4},
        "list_count_b": {"ordered": 0, "unordered": 1},
        "bold_count_a": {"**": 5, "__": 1},
        "bold_count_b": {"**": 0, "__": 2},
    }
    df = pd.DataFrame({"model_a": ["x"], "model_b": ["y"], "winner": ["tie"]})
    df["conv_metadata"] = [meta]
    flat = flatten_conv_metadata(df).iloc[0]
    assert (flat.header_count_a, flat.list_count_a, flat.bold_count_a) == (4, 7, 6)
    assert (flat.header_count_b, flat.list_count_b, flat.bold_count_b) == (0, 1, 2)
    assert (flat.sum_assistant_a_tokens, flat.sum_assistant_b_tokens) == (10, 20)
    del meta["list_count_b"]
    with pytest.raises(EngineError, match="conv_metadata.list_count_b"):
        flatten_conv_metadata(df)


def test_result_is_json_serialisable():
    import json

    result = rate(battles(n=100), ci="bootstrap", rounds=5)
    assert json.loads(json.dumps(result))["n_battles"] == 100


def test_fit_from_a_distant_start_reaches_the_same_maximum():
    encoded = data.encode(battles(n=600, p=6), style_control=True, reweight=False)
    rows = bt.rows_from_battles(encoded, 0.0)
    near = bt.fit(rows)
    far = bt.fit(rows, theta0=np.r_[np.linspace(-15, 15, 6), np.full(4, 5.0)])
    p = rows.n_models
    centred = [f.theta[:p] - f.theta[:p].mean() for f in (near, far)]
    assert np.abs(centred[0] - centred[1]).max() < 1e-9
    assert np.abs(near.theta[p:] - far.theta[p:]).max() < 1e-9
    assert far.gradient_max_norm < 1e-8


def test_a_style_element_collinear_with_earlier_ones_is_dropped_and_reported_as_null():
    df = battles()
    df["bold_count_a"], df["bold_count_b"] = df["header_count_a"], df["header_count_b"]
    result = rate(df)
    assert result["style_coefficients"]["bold"] is None
    assert result["method"]["degenerate_style_elements"] == ["bold"]
    without = rate(df.assign(bold_count_a=0, bold_count_b=0))
    for name in ("length", "header", "list"):
        expected = without["style_coefficients"][name]
        assert result["style_coefficients"][name] == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("ci", ["sandwich", "bootstrap"])
def test_a_style_element_that_is_one_models_signature_is_dropped_not_a_crash(ci):
    """m0 always answers with one header and nobody else ever does, whichever side m0 is on,
    and every battle is also played with the sides swapped: the (centred) header difference is
    then the m0 contrast itself, so its coefficient is not identified."""
    df = battles(p=3)
    df["header_count_a"] = (df["model_a"] == "m0").astype(int)
    df["header_count_b"] = (df["model_b"] == "m0").astype(int)
    swapped = df.rename(
        columns={
            "model_a": "model_b",
            "model_b": "model_a",
            **{f"{c}_a": f"{c}_b" for c in ("header_count", "list_count", "bold_count")},
            **{f"{c}_b": f"{c}_a" for c in ("header_count", "list_count", "bold_count")},
            "sum_assistant_a_tokens": "sum_assistant_b_tokens",
            "sum_assistant_b_tokens": "sum_assistant_a_tokens",
        }
    )
    swapped["winner"] = swapped["winner"].replace({"model_a": "model_b", "model_b": "model_a"})
    df = pd.concat([df, swapped[df.columns]], ignore_index=True)
    result = rate(df, ci=ci, rounds=20)
    assert result["style_coefficients"]["header"] is None
    assert result["method"]["degenerate_style_elements"] == ["header"]
    without = rate(df.assign(header_count_a=0, header_count_b=0), ci=ci, rounds=20)
    got = {m["model"]: m["rating"] for m in result["models"]}
    expected = {m["model"]: m["rating"] for m in without["models"]}
    assert got == pytest.approx(expected, abs=1e-6)
    for name in ("length", "list", "bold"):
        want = without["style_coefficients"][name]
        assert result["style_coefficients"][name] == pytest.approx(want, abs=1e-9)


def test_two_models_whose_styles_never_change_are_rated_with_every_style_element_dropped():
    sides = [("m1", "m2"), ("m2", "m1")] * 3
    winners = ["model_a", "model_b", "model_b", "tie", "tie (bothbad)", "model_a"]
    df = pd.DataFrame(
        {
            "model_a": [a for a, _ in sides],
            "model_b": [b for _, b in sides],
            "winner": winners,
            "sum_assistant_a_tokens": [40 if a == "m1" else 10 for a, _ in sides],
            "sum_assistant_b_tokens": [40 if b == "m1" else 10 for _, b in sides],
            "header_count_a": [1 if a == "m1" else 0 for a, _ in sides],
            "header_count_b": [1 if b == "m1" else 0 for _, b in sides],
            "list_count_a": 0,
            "list_count_b": 0,
            "bold_count_a": 0,
            "bold_count_b": 0,
        }
    )
    result = rate(df)
    plain = rate(df, style_control=False)
    assert result["method"]["degenerate_style_elements"] == ["length", "header", "list", "bold"]
    got = [(m["model"], m["rating"], m["rating_lower"]) for m in result["models"]]
    want = [(m["model"], m["rating"], m["rating_lower"]) for m in plain["models"]]
    assert [g[0] for g in got] == [w[0] for w in want]
    assert [g[1:] for g in got] == [pytest.approx(w[1:], abs=1e-6) for w in want]


def test_replicate_check_refuses_a_model_that_won_every_battle_on_either_side():
    """The check a bootstrap replicate passes before it is fitted: ``champ`` beat m0 as side A
    and m1 as side B and never lost, so its rating is unbounded; one tie makes it ratable."""
    beaten = pd.DataFrame(
        {"model_a": ["champ", "m1"], "model_b": ["m0", "champ"], "winner": ["model_a", "model_b"]}
    )
    df = pd.concat([identified_battles([], 3), beaten], ignore_index=True)
    encoded = data.encode(df, style_control=False, reweight=False)
    with pytest.raises(EngineError, match="maximum-likelihood ratings do not exist"):
        bt.check_identified(bt.rows_from_battles(encoded, 0.0), encoded.models)

    tied = pd.DataFrame({"model_a": ["m2"], "model_b": ["champ"], "winner": ["tie (bothbad)"]})
    encoded = data.encode(
        pd.concat([df, tied], ignore_index=True), style_control=False, reweight=False
    )
    bt.check_identified(bt.rows_from_battles(encoded, 0.0), encoded.models)  # does not raise


def a_model_with_two(outcomes: str, style: bool) -> pd.DataFrame:
    """Four models with plenty of battles, and m9 with only 2 wins (or 2 losses) in 80 battles
    against them, one on each side; it plays 40 as model_a and 40 as model_b."""
    df = battles(n=300, p=4, seed=1, style=style)
    opponents = [f"m{i}" for i in np.random.default_rng(5).integers(0, 4, 80)]
    m9_won = np.zeros(80, dtype=bool) if outcomes == "wins" else np.ones(80, dtype=bool)
    m9_won[[3, 50]] = outcomes == "wins"
    m9_is_a = np.arange(80) % 2 == 0
    fragile = pd.DataFrame(
        {
            "model_a": np.where(m9_is_a, "m9", opponents),
            "model_b": np.where(m9_is_a, opponents, "m9"),
            "winner": np.where(m9_won == m9_is_a, "model_a", "model_b"),
        }
    )
    for column in df.columns[3:]:
        fragile[column] = df[column].iloc[:80].to_numpy()
    return pd.concat([df, fragile], ignore_index=True)


@pytest.mark.parametrize(("outcomes", "style"), [("wins", True), ("losses", True), ("wins", False)])
def test_bootstrap_redraws_replicates_that_lose_a_models_only_wins_or_losses(outcomes, style):
    """About one replicate in seven draws neither of m9's 2 wins (or losses); m9 then has no
    finite rating in it, and fitting it anyway puts m9 thousands of points away (and moves
    everyone else). Such replicates are redrawn, so each bootstrap interval stays of the
    sandwich interval's order."""
    df = a_model_with_two(outcomes, style)
    sandwich = {m["model"]: m for m in rate(df, style_control=style)["models"]}
    boot = rate(df, style_control=style, ci="bootstrap", rounds=40, seed=1)
    for row in boot["models"]:
        width = sandwich[row["model"]]["rating_upper"] - sandwich[row["model"]]["rating_lower"]
        assert row["rating_lower"] < row["rating"] < row["rating_upper"]
        assert row["rating_upper"] - row["rating_lower"] < 2 * width


def test_bootstrap_whose_replicates_almost_never_have_ratings_says_so():
    """20 models in one cycle of 20 battles (each beat the next): a replicate keeps every
    battle with probability 20!/20^20, so after 100 draws the bootstrap gives up."""
    models = [f"c{i:02d}" for i in range(20)]
    df = pd.DataFrame({"model_a": models, "model_b": models[1:] + models[:1], "winner": "model_a"})
    assert {m["rating"] for m in rate(df, style_control=False)["models"]} == {1000.0}
    with pytest.raises(
        EngineError, match=r"^bootstrap replicates keep losing a model's only wins or losses$"
    ):
        rate(df, style_control=False, ci="bootstrap", rounds=5, seed=0)


def test_a_single_varying_style_element_is_fitted():
    """Only the answers' lengths vary: length is the one style element left, and it is fitted
    (statsmodels' coefficient on the z-scored length difference), not dropped."""
    df = battles().assign(header_count_a=0, header_count_b=0, list_count_a=0, list_count_b=0)
    df = df.assign(bold_count_a=0, bold_count_b=0)
    result = rate(df)
    assert result["method"]["degenerate_style_elements"] == ["header", "list", "bold"]
    models = sorted(set(df.model_a) | set(df.model_b))
    raw, _ = data.style_differences(df)
    length = (raw[0] - raw[0].mean()) / raw[0].std()
    design = np.zeros((len(df), len(models)))
    index = {m: i for i, m in enumerate(models)}
    design[np.arange(len(df)), df.model_a.map(index)] = 1
    design[np.arange(len(df)), df.model_b.map(index)] = -1
    y = df.winner.map(data.OUTCOMES).to_numpy()
    logit = sm.Logit(y, np.column_stack([design[:, 1:], length])).fit(disp=0, tol=1e-12)
    assert result["style_coefficients"]["length"] == pytest.approx(logit.params[-1], abs=1e-8)


def test_style_bootstrap_whose_replicates_almost_never_have_ratings_says_so():
    """The Poisson (style) bootstrap gives up the same way: 30 models in one cycle, 10 of its
    battles played twice, answer lengths varying; a replicate keeps the cycle with probability
    about 1e-5."""
    models = [f"c{i:02d}" for i in range(30)]
    df = pd.DataFrame({"model_a": models, "model_b": models[1:] + models[:1], "winner": "model_a"})
    df = pd.concat([df, df.iloc[:10]], ignore_index=True)
    lengths = np.random.default_rng(0).integers(10, 1000, (2, len(df)))
    df["sum_assistant_a_tokens"], df["sum_assistant_b_tokens"] = lengths
    for element in ("header_count", "list_count", "bold_count"):
        df[f"{element}_a"] = df[f"{element}_b"] = 0
    assert rate(df)["style_coefficients"]["length"] is not None
    with pytest.raises(
        EngineError, match=r"^bootstrap replicates keep losing a model's only wins or losses$"
    ):
        rate(df, ci="bootstrap", rounds=5, seed=0)


def pair_propensity(df: pd.DataFrame, seed: int = 0) -> dict[tuple[str, str], float]:
    """A draw probability per unordered pair, unequal (as an active sampler's are)."""
    rng = np.random.default_rng(seed)
    models = sorted(set(df.model_a) | set(df.model_b))
    return {
        (a, b): float(rng.uniform(0.01, 0.3)) for i, a in enumerate(models) for b in models[i + 1 :]
    }


def weighted_glm(df: pd.DataFrame, *, style: bool, position: bool, propensity=None):
    """GLM (binomial) on the explicit design: +1/-1 model columns (first model dropped),
    z-scored style, a column of ones for side A's (left) position; ``var_weights`` 1/propensity."""
    models = sorted(set(df.model_a) | set(df.model_b))
    index = {m: i for i, m in enumerate(models)}
    n, p = len(df), len(models)
    x = np.zeros((n, p))
    x[np.arange(n), df.model_a.map(index)] = 1
    x[np.arange(n), df.model_b.map(index)] = -1
    columns = [x[:, 1:]]
    if style:
        raw, _ = data.style_differences(df)
        columns.append(((raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)).T)
    if position:
        columns.append(np.ones((n, 1)))
    weight = np.ones(n)
    if propensity is not None:
        weight = np.array(
            [
                1 / propensity.get((a, b), propensity.get((b, a)))
                for a, b in zip(df.model_a, df.model_b, strict=True)
            ]
        )
    y = df.winner.map(data.OUTCOMES).to_numpy()
    design = np.column_stack(columns)
    family = sm.families.Binomial()
    robust = sm.GLM(y, design, family=family, var_weights=weight).fit(tol=1e-13, cov_type="HC0")
    return models, robust


@pytest.mark.parametrize("style", [False, True], ids=["plain", "style"])
@pytest.mark.parametrize(
    "options", ["position", "propensity", "both"], ids=["position", "ipw", "position+ipw"]
)
def test_position_and_propensity_weights_equal_a_weighted_statsmodels_glm_hc0(style, options):
    df = battles(n=600, p=5, seed=3, style=style)
    position = options in ("position", "both")
    propensity = pair_propensity(df) if options in ("propensity", "both") else None
    models, robust = weighted_glm(df, style=style, position=position, propensity=propensity)
    cov = robust.cov_params()
    expected, se = centred_ratings(models, robust.params, cov)
    result = engine_rate(df, style_control=style, position=position, propensity=propensity)
    assert result.method.position is position
    assert result.method.inverse_propensity is (propensity is not None)
    for row in result.models:
        assert row.rating == pytest.approx(expected[row.model], abs=1e-6)
        half_width = (row.rating_upper - row.rating_lower) / 2
        assert half_width == pytest.approx(1.959963984540054 * se[row.model], rel=1e-6)
    p = len(models)
    robust_se = np.sqrt(np.diag(cov))
    if style:
        assert result.style_coefficients is not None and result.style_intervals is not None
        for j, name in enumerate(data.STYLE_ELEMENTS):
            assert result.style_coefficients[name] == pytest.approx(
                robust.params[p - 1 + j], abs=1e-6
            )
            lo, hi = result.style_intervals[name]
            assert (hi - lo) / 2 == pytest.approx(
                1.959963984540054 * robust_se[p - 1 + j], rel=1e-6
            )
    if position:
        assert result.position is not None
        assert result.position.coefficient == pytest.approx(robust.params[-1], abs=1e-6)
        assert result.position.standard_error == pytest.approx(robust_se[-1], rel=1e-6)
        assert result.position.lower == pytest.approx(
            robust.params[-1] - 1.959963984540054 * robust_se[-1], abs=1e-6
        )
    else:
        assert result.position is None


def test_a_left_side_advantage_in_the_votes_is_recovered_by_the_position_coefficient():
    rng = np.random.default_rng(7)
    n, p = 20_000, 6
    a = rng.integers(0, p, n)
    b = (a + rng.integers(1, p, n)) % p
    z = np.linspace(-1, 1, p)[a] - np.linspace(-1, 1, p)[b] + 0.3
    winner = np.where(rng.random(n) < 1 / (1 + np.exp(-z)), "model_a", "model_b")
    df = pd.DataFrame({"model_a": [f"m{i}" for i in a], "model_b": [f"m{i}" for i in b]})
    df["winner"] = winner
    result = engine_rate(df, style_control=False, position=True)
    assert result.position is not None and result.position.coefficient is not None
    assert result.position.lower < 0.3 < result.position.upper
    assert result.position.lower > 0.2
    off = engine_rate(df, style_control=False)
    assert off.position is None and off.to_dict()["position"] is None


def test_a_position_the_data_cannot_tell_from_the_ratings_is_none():
    # m0 is always on the left: its rating and the left side's advantage trade off exactly.
    df = pd.DataFrame(
        {
            "model_a": ["m0"] * 8,
            "model_b": ["m1", "m1", "m2", "m2"] * 2,
            "winner": ["model_a", "model_b"] * 4,
        }
    )
    result = engine_rate(df, style_control=False, position=True)
    assert result.position is not None
    assert result.position.coefficient is None and result.position.standard_error is None
    assert result.to_dict()["position"] == {
        "coefficient": None,
        "standard_error": None,
        "interval": None,
    }


@pytest.mark.parametrize("style", [False, True], ids=["plain", "style"])
def test_bootstrap_gives_the_position_an_interval_like_the_sandwich(style):
    df = battles(n=2000, p=5, seed=4, style=style)
    sandwich = engine_rate(df, style_control=style, position=True)
    boot = engine_rate(df, style_control=style, position=True, ci="bootstrap", rounds=200)
    assert sandwich.position is not None and boot.position is not None
    assert boot.position.coefficient == pytest.approx(sandwich.position.coefficient, abs=1e-9)
    assert boot.position.lower < boot.position.coefficient < boot.position.upper
    assert boot.position.standard_error == pytest.approx(sandwich.position.standard_error, rel=0.25)


def test_a_pair_without_a_draw_probability_is_refused_naming_it():
    df = battles(n=300, p=4, style=False)
    propensity = pair_propensity(df)
    del propensity[("m1", "m2")]
    with pytest.raises(EngineError, match="m1 / m2|m2 / m1"):
        engine_rate(df, style_control=False, propensity=propensity)
    propensity[("m2", "m1")] = 0.0
    with pytest.raises(EngineError, match="draw probability"):
        engine_rate(df, style_control=False, propensity=propensity)
