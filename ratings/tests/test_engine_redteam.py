"""The robustness fit against an independent statsmodels Logit, on recovery, on identification."""

import numpy as np
import pytest
import statsmodels.api as sm

from ratings.engine.redteam import fit_robustness


def _simulate(rng, n, skill, robustness, difficulty):
    p = rng.integers(0, len(skill), n)
    m = rng.integers(0, len(robustness), n)
    c = rng.integers(0, len(difficulty), n)
    z = skill[p] - robustness[m] - difficulty[c]
    y = rng.random(n) < 1.0 / (1.0 + np.exp(-z))
    return p, m, c, y


def _centring(n_p, n_m, n_c):
    """Map from statsmodels' coefficients (players, models but the first, challenges but the
    first; no intercept) to centred (skill, robustness, difficulty)."""
    size = n_p + (n_m - 1) + (n_c - 1)
    to_full = np.zeros((n_p + n_m + n_c, size))
    to_full[:n_p, :n_p] = np.eye(n_p)
    to_full[n_p + 1 : n_p + n_m, n_p : n_p + n_m - 1] = np.eye(n_m - 1)
    to_full[n_p + n_m + 1 :, n_p + n_m - 1 :] = np.eye(n_c - 1)
    centre = np.eye(n_p + n_m + n_c)
    mean_r = np.zeros(n_p + n_m + n_c)
    mean_r[n_p : n_p + n_m] = 1 / n_m
    mean_d = np.zeros(n_p + n_m + n_c)
    mean_d[n_p + n_m :] = 1 / n_c
    centre[:n_p] -= mean_r + mean_d
    centre[n_p : n_p + n_m] -= mean_r
    centre[n_p + n_m :] -= mean_d
    return centre @ to_full


@pytest.mark.parametrize("interval", ["hessian", "sandwich"])
def test_the_fit_equals_a_statsmodels_logit_on_an_explicit_design_matrix(interval):
    rng = np.random.default_rng(3)
    n_p, n_m, n_c = 12, 5, 4
    p, m, c, y = _simulate(
        rng, 3000, rng.normal(0, 1, n_p), rng.normal(0, 1, n_m), rng.normal(0, 0.7, n_c)
    )
    fit = fit_robustness(
        [f"p{i:02d}" for i in p], [f"m{i}" for i in m], [f"c{i}" for i in c], y, interval=interval
    )
    assert not fit.excluded
    # z = s_p - r_m - d_c: +1 in the player's column, -1 in the model's and the challenge's.
    design = np.zeros((len(y), n_p + n_m + n_c))
    design[np.arange(len(y)), p] = 1.0
    design[np.arange(len(y)), n_p + m] = -1.0
    design[np.arange(len(y)), n_p + n_m + c] = -1.0
    design = np.delete(design, [n_p, n_p + n_m], axis=1)  # reference model and challenge
    cov_type = "nonrobust" if interval == "hessian" else "HC0"
    sm_fit = sm.Logit(y.astype(float), design).fit(
        method="newton", tol=1e-12, maxiter=100, disp=False, cov_type=cov_type
    )
    t = _centring(n_p, n_m, n_c)
    expected = t @ sm_fit.params
    expected_se = np.sqrt(np.diag(t @ sm_fit.cov_params() @ t.T))
    ours = [e.estimate for e in (*fit.players, *fit.models, *fit.challenges)]
    ours_se = [e.se for e in (*fit.players, *fit.models, *fit.challenges)]
    np.testing.assert_allclose(ours, expected, atol=1e-6)
    np.testing.assert_allclose(ours_se, expected_se, rtol=1e-5, atol=1e-8)
    assert abs(sum(e.estimate for e in fit.models)) < 1e-9
    assert abs(sum(e.estimate for e in fit.challenges)) < 1e-9


def test_a_large_simulation_recovers_the_robustness_within_its_intervals():
    rng = np.random.default_rng(11)
    skill = rng.normal(0, 1, 40)
    robustness = np.array([-1.0, -0.3, 0.0, 0.4, 0.9])
    difficulty = np.array([-0.5, 0.0, 0.5])
    p, m, c, y = _simulate(rng, 40000, skill, robustness, difficulty)
    fit = fit_robustness([f"p{i:02d}" for i in p], [f"m{i}" for i in m], [f"c{i}" for i in c], y)
    truth_r = robustness - robustness.mean()
    truth_d = difficulty - difficulty.mean()
    covered = [e.lower <= t <= e.upper for e, t in zip(fit.models, truth_r, strict=True)]
    covered += [e.lower <= t <= e.upper for e, t in zip(fit.challenges, truth_d, strict=True)]
    assert sum(covered) >= len(covered) - 1  # 95% intervals: at most one miss of eight
    for e, t in zip(fit.models, truth_r, strict=True):
        assert abs(e.estimate - t) < 0.1


def test_a_player_who_always_succeeds_is_excluded_and_the_rest_is_fitted():
    rng = np.random.default_rng(5)
    p, m, c, y = _simulate(rng, 2000, rng.normal(0, 1, 8), rng.normal(0, 1, 3), np.zeros(2))
    players = [f"p{i}" for i in p] + ["ace"] * 6
    models = [f"m{i}" for i in m] + ["m0", "m1", "m2"] * 2
    challenges = [f"c{i}" for i in c] + ["c0", "c1"] * 3
    success = np.r_[y, np.ones(6, dtype=bool)]
    fit = fit_robustness(players, models, challenges, success)
    assert [(e.kind, e.name, e.reason) for e in fit.excluded] == [("player", "ace", "no_losses")]
    assert "ace" not in {e.name for e in fit.players}
    alone = fit_robustness(players[:-6], models[:-6], challenges[:-6], success[:-6])
    assert [e.estimate for e in fit.models] == pytest.approx([e.estimate for e in alone.models])
    assert fit.n_attempts == 2000


def test_a_model_never_broken_is_excluded_as_never_losing():
    players = ["a", "a", "b", "b", "a", "b"]
    models = ["x", "y", "x", "y", "z", "z"]
    challenges = ["c"] * 6
    success = [True, False, False, True, False, False]
    fit = fit_robustness(players, models, challenges, success)
    assert ("model", "z", "no_losses") in [(e.kind, e.name, e.reason) for e in fit.excluded]
