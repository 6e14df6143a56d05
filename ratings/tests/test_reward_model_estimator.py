"""The reward model's head and features without Django or torch: the fit, its Laplace
intervals, the group rewards' scale, the penalty's choice and the split by group."""

import math

import numpy as np
import pytest

from ratings.reward_model.estimator import (
    ELO_PER_LOGIT,
    Z95,
    fit_bt_head,
    fold_of_groups,
    group_rewards,
    log_loss,
    prior_head,
    select_l2,
    win_probability,
)
from ratings.reward_model.features import (
    FeatureSpec,
    fitted_spec,
    raw_features,
    standardised,
    style_vector,
)


def _synthetic(n: int = 4000, d: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    diffs = rng.normal(size=(n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-(diffs @ w)))).astype(float)
    return w, diffs, y


def test_the_head_recovers_the_weights_that_generated_the_votes():
    w, diffs, y = _synthetic()
    head = fit_bt_head(diffs, y, l2=1e-3)
    assert np.abs(head.weights_ - w).max() < 0.15


def test_the_fit_stops_at_a_zero_of_the_penalised_gradient():
    _, diffs, y = _synthetic(n=500)
    head = fit_bt_head(diffs, y, l2=2.0)
    p = win_probability(head, diffs)
    gradient = diffs.T @ (p - y) + 2.0 * head.weights_
    assert np.abs(gradient).max() < 1e-8


def test_the_covariance_is_the_inverse_hessian_at_the_fit():
    _, diffs, y = _synthetic(n=300)
    head = fit_bt_head(diffs, y, l2=0.5)
    p = win_probability(head, diffs)
    hessian = (diffs.T * (p * (1 - p))) @ diffs + 0.5 * np.eye(diffs.shape[1])
    assert np.allclose(head.covariance_ @ hessian, np.eye(diffs.shape[1]), atol=1e-9)


def test_a_tie_is_half_a_win():
    # One pair, a tie: the penalised optimum is w = 0 whatever the features.
    head = fit_bt_head(np.array([[1.0, -2.0]]), np.array([0.5]), l2=0.1)
    assert np.allclose(head.weights_, 0.0)
    # Two votes, a win and a loss on the same pair, are the same as two ties.
    split = fit_bt_head(np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([1.0, 0.0]), l2=0.1)
    ties = fit_bt_head(np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([0.5, 0.5]), l2=0.1)
    assert np.allclose(split.weights_, ties.weights_)


def test_without_votes_the_head_is_its_prior():
    head = prior_head(3, l2=4.0)
    assert np.allclose(head.weights_, 0.0)
    assert np.allclose(head.covariance_, np.eye(3) / 4.0)


def test_the_penalty_must_be_positive():
    with pytest.raises(ValueError):
        fit_bt_head(np.zeros((1, 2)), np.ones(1), l2=0.0)


def test_group_rewards_are_elo_points_around_the_group_mean_with_laplace_intervals():
    _, diffs, y = _synthetic(n=400, d=3)
    head = fit_bt_head(diffs, y, l2=1.0)
    features = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [0.5, 0.5, -1.0]])
    rewards = group_rewards(head, features)
    assert abs(rewards.score.sum()) < 1e-9
    centred = features - features.mean(axis=0)
    assert np.allclose(rewards.score, centred @ head.weights_ * ELO_PER_LOGIT)
    sd = np.sqrt(np.diag(centred @ head.covariance_ @ centred.T)) * ELO_PER_LOGIT
    assert np.allclose(rewards.high - rewards.score, Z95 * sd)
    assert np.allclose(rewards.score - rewards.low, Z95 * sd)
    # The difference of two rewards is the head's log-odds, in Elo points.
    logit = (rewards.score[0] - rewards.score[1]) / ELO_PER_LOGIT
    assert math.isclose(logit, float((features[0] - features[1]) @ head.weights_))


def test_more_votes_narrow_the_intervals():
    _, diffs, y = _synthetic(n=4000, d=3)
    features = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    few = group_rewards(fit_bt_head(diffs[:100], y[:100], l2=1.0), features)
    many = group_rewards(fit_bt_head(diffs, y, l2=1.0), features)
    assert (many.high - many.low < few.high - few.low).all()


def test_folds_keep_every_row_of_a_group_together():
    groups = [f"q{i % 17}" for i in range(200)]
    folds = fold_of_groups(groups, 5, seed=3)
    for group in set(groups):
        assert len({int(f) for f, g in zip(folds, groups, strict=True) if g == group}) == 1
    assert set(folds.tolist()) == {0, 1, 2, 3, 4}


def test_the_penalty_chosen_fits_held_out_groups_best():
    rng = np.random.default_rng(1)
    # Pure noise: the held-out loss is lowest with the strongest penalty of the grid.
    diffs = rng.normal(size=(600, 40))
    y = (rng.random(600) < 0.5).astype(float)
    groups = [i % 30 for i in range(600)]
    chosen = select_l2(diffs, y, groups, grid=(0.001, 1.0))
    assert chosen == pytest.approx(1.0 * 600)


def test_log_loss_of_a_sure_right_answer_is_near_zero_and_of_a_coin_is_ln_2():
    assert log_loss(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == pytest.approx(math.log(2))
    assert log_loss(np.array([1 - 1e-9]), np.array([1.0])) < 1e-6


def test_style_features_are_log_counts_summed_over_an_answers_turns():
    one = {
        "tokens": 9,
        "header_count": {"h1": 1, "h2": 2},
        "list_count": {"ordered": 3, "unordered": 0},
        "bold_count": {"**": 0, "__": 0},
    }
    assert style_vector(one) == pytest.approx([math.log(10), math.log(4), math.log(4), 0.0])
    assert style_vector([one, one]) == pytest.approx([math.log(19), math.log(7), math.log(7), 0.0])
    assert style_vector(None) == [0.0, 0.0, 0.0, 0.0]


def test_features_hold_the_embedding_its_cosine_to_the_prompt_and_the_style():
    spec = FeatureSpec(embedding="e", embedding_dim=2, style=True)
    answers = np.array([[1.0, 0.0], [0.0, 1.0]])
    prompts = np.array([[1.0, 0.0], [1.0, 0.0]])
    styles = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]])
    raw = raw_features(spec, answer_embeddings=answers, prompt_embeddings=prompts, styles=styles)
    assert raw.shape == (2, spec.dim) == (2, 7)
    assert raw[:, 2].tolist() == [1.0, 0.0]  # the cosines
    fitted = fitted_spec(spec, raw)
    z = standardised(fitted, raw)
    assert np.allclose(z.mean(axis=0), 0.0)
    assert FeatureSpec.from_json(fitted.as_json()) == fitted
