"""The anomalous-voter test (ratings.engine.anomaly): per-vote p-values against the other voters'
rates on the pair, Fisher's method per voter, and a scripted attacker among honest voters."""

import math

import numpy as np
import pandas as pd
import pytest

from ratings.engine.anomaly import (
    AnomalyResult,
    fisher_log_sf,
    fitted_expectations,
    held_out_expectations,
    model_expectations,
    vote_p_values,
    voter_fit_test,
    voter_model_test,
    voters_anomaly,
    voters_combined,
    voters_flagged,
)


def frame(rows):
    return pd.DataFrame(rows, columns=["voter", "model_a", "model_b", "winner"])


def test_a_vote_is_tested_against_the_other_voters_rates_with_one_pseudo_vote_per_outcome():
    # Others: x beat y 8 times, y never won, one tie. With the prior: (9, 1, 2) / 12.
    others = [("o", "x", "y", "model_a")] * 8 + [("o", "x", "y", "tie")]
    upset = vote_p_values(frame([*others, ("u", "x", "y", "model_b")]))[-1]
    # Outcomes at most as likely as "y wins" (1/12): only itself.
    assert upset == pytest.approx(1 / 12)
    expected = vote_p_values(frame([*others, ("u", "x", "y", "model_a")]))[-1]
    assert expected == pytest.approx(1.0)  # every outcome is at most as likely as the likeliest
    tie = vote_p_values(frame([*others, ("u", "x", "y", "tie")]))[-1]
    assert tie == pytest.approx(3 / 12)  # the tie (2/12) and y's win (1/12)


def test_orientation_and_both_bad_are_read_relative_to_the_pair():
    others = [("o", "x", "y", "model_a")] * 8 + [("o", "y", "x", "model_b")] * 2
    swapped = vote_p_values(frame([*others, ("u", "y", "x", "model_a")]))[-1]
    same = vote_p_values(frame([*others, ("u", "x", "y", "model_b")]))[-1]
    # Others: x won all 10 (8 from side A, 2 from side B). Rates (11, 1, 1) / 13: y's win is as
    # unlikely as a tie, so both count.
    assert swapped == pytest.approx(same) == pytest.approx(2 / 13)
    both_bad = vote_p_values(frame([*others, ("u", "x", "y", "tie (bothbad)")]))[-1]
    tie = vote_p_values(frame([*others, ("u", "x", "y", "tie")]))[-1]
    assert both_bad == pytest.approx(tie)


def test_the_voters_own_votes_never_count_in_the_rates_they_are_tested_against():
    # Alone on the pair, a voter's 20 identical votes meet the prior only: a third each, p = 1.
    alone = vote_p_values(frame([("u", "x", "y", "model_b")] * 20))
    assert np.allclose(alone, 1.0)
    # Another voter's 20 "x wins" make the same votes unlikely.
    crowd = frame([("o", "x", "y", "model_a")] * 20 + [("u", "x", "y", "model_b")] * 20)
    assert np.allclose(vote_p_values(crowd)[20:], 2 / 23)  # rates (21, 1, 1) / 23


@pytest.mark.parametrize(("statistic", "k"), [(0.5, 1), (10.0, 3), (80.0, 20), (400.0, 60)])
def test_fisher_survival_matches_the_closed_form_for_even_degrees_of_freedom(statistic, k):
    half = statistic / 2
    closed = math.exp(-half) * sum(half**i / math.factorial(i) for i in range(k))
    got = math.exp(fisher_log_sf(np.array([statistic]), np.array([k]))[0])
    assert got == pytest.approx(closed, rel=1e-9)


def test_a_voter_below_the_minimum_count_gets_no_combined_p_value():
    crowd = [("o", "x", "y", "model_a")] * 30
    result = voters_anomaly(frame([*crowd, *[("u", "x", "y", "model_b")] * 9]), min_votes=10)
    u = result.voters.set_index("voter").loc["u"]
    assert u["n_votes"] == 9 and math.isnan(u["p_value"])
    result = voters_anomaly(frame([*crowd, *[("u", "x", "y", "model_b")] * 10]), min_votes=10)
    # Ten votes at p = 2/33 each: Fisher gives about 3e-5.
    assert result.voters.set_index("voter").loc["u", "p_value"] < 1e-4


def synthetic_arena(seed, *, honest=20, votes_each=60, attacker_votes=50):
    """Honest voters follow Bradley-Terry strengths (10% ties); the attacker has identified the
    weakest model and votes for it in every battle they get, against the consensus."""
    rng = np.random.default_rng(seed)
    models = ["m0", "m1", "m2", "m3", "m4"]
    strength = np.array([0.0, 0.75, 1.5, 2.25, 3.0])
    rows = []
    for v in range(honest):
        for _ in range(votes_each):
            i, j = rng.choice(5, 2, replace=False)
            p_a = 1 / (1 + np.exp(strength[j] - strength[i]))
            if rng.random() < 0.1:
                winner = "tie"
            else:
                winner = "model_a" if rng.random() < p_a else "model_b"
            rows.append((f"honest-{v}", models[i], models[j], winner))
    for _ in range(attacker_votes):
        other = models[rng.integers(1, 5)]
        if rng.random() < 0.5:
            rows.append(("attacker", "m0", other, "model_a"))
        else:
            rows.append(("attacker", other, "m0", "model_b"))
    return frame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_the_scripted_attacker_is_flagged_and_no_honest_voter_is(seed):
    result = voters_anomaly(synthetic_arena(seed), min_votes=10)
    flagged = voters_flagged(result, threshold=1e-4)
    assert list(flagged["voter"]) == ["attacker"]
    honest = result.voters[result.voters["voter"] != "attacker"]
    assert len(honest) == 20 and (honest["p_value"] > 1e-2).all()


def test_no_votes_give_empty_results():
    result = voters_anomaly(frame([]), min_votes=10)
    assert result.votes.empty and result.voters.empty
    assert voters_flagged(result, threshold=1e-4).empty


def targeted_arena(seed):
    """Honest voters judge the pairs m0-m1, m0-m2, m1-m2 and m3-m4, m1-m3 (Bradley-Terry, 10%
    ties); the attacker meets only pairs nobody else judged (m0 against m3 and m4) and votes for
    m0, the weakest, every time."""
    rng = np.random.default_rng(seed)
    strength = {"m0": 0.0, "m1": 0.5, "m2": 1.0, "m3": 1.5, "m4": 2.0}
    pairs = [("m0", "m1"), ("m0", "m2"), ("m1", "m2"), ("m3", "m4"), ("m1", "m3")]
    rows = []
    for v in range(20):
        for _ in range(40):
            a, b = pairs[rng.integers(len(pairs))]
            p_a = 1 / (1 + np.exp(strength[b] - strength[a]))
            roll = rng.random()
            winner = "tie" if roll < 0.1 else ("model_a" if rng.random() < p_a else "model_b")
            rows.append((f"honest-{v}", a, b, winner))
    for i in range(40):
        other = ("m3", "m4")[i % 2]
        rows.append(("attacker", "m0", other, "model_a"))
    return frame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_targeted_voter_on_pairs_nobody_else_judged_is_caught_by_the_voter_model_test(seed):
    votes = targeted_arena(seed)
    crowd = voters_anomaly(votes, min_votes=10).voters
    # Alone on its pairs, the crowd test has nothing to hold the attacker against.
    assert crowd.set_index("voter").loc["attacker", "p_value"] > 0.5
    expectations = fitted_expectations(votes)
    model = voter_model_test(votes, expectations, min_votes=10).set_index("voter")
    assert model.loc["attacker", "p_value"] < 1e-6 and model.loc["attacker", "model"] == "m0"
    combined = voters_combined(crowd, model.reset_index(), voter_fit_test(votes, expectations))
    flagged = voters_flagged(AnomalyResult(votes=votes, voters=combined), threshold=1e-4)
    assert list(flagged["voter"]) == ["attacker"]
    honest = combined[combined["voter"] != "attacker"]
    assert (honest["p_value"] > 1e-3).all()


def test_the_voter_model_statistic_is_the_likelihood_ratio_of_the_voters_own_shift():
    from scipy.stats import chi2

    # Two models at equal strength: p = 1/2 everywhere. 12 wins and 4 losses for x: the voter's
    # own shift is logit(12/16) = ln 3, and LR = 2 [12 ln(0.75/0.5) + 4 ln(0.25/0.5)].
    votes = frame([("u", "x", "y", "model_a")] * 12 + [("u", "x", "y", "model_b")] * 4)
    expectations = model_expectations(votes["model_a"], votes["model_b"], logits={"x": 0, "y": 0})
    row = voter_model_test(votes, expectations, min_votes=10).iloc[0]
    lr = 2 * (12 * math.log(1.5) + 4 * math.log(0.5))
    assert row["z"] == pytest.approx(math.sqrt(lr)) and row["n_models"] == 2
    assert row["p_value"] == pytest.approx(2 * chi2.sf(lr, 1))


def test_a_record_of_only_wins_has_the_likelihood_ratio_of_its_probabilities():
    from scipy.stats import chi2

    votes = frame([("u", "x", "y", "model_a")] * 16)
    expectations = model_expectations(votes["model_a"], votes["model_b"], logits={"x": 0, "y": 0})
    row = voter_model_test(votes, expectations, min_votes=10).iloc[0]
    assert row["z"] ** 2 == pytest.approx(-2 * 16 * math.log(0.5))
    assert row["p_value"] == pytest.approx(2 * chi2.sf(-2 * 16 * math.log(0.5), 1))


def test_the_fit_test_sees_a_voter_who_votes_against_the_style_the_crowd_rewards():
    rng = np.random.default_rng(5)
    n = 60
    length = rng.normal(size=n)
    votes = frame([("u", "x", "y", "model_a" if d < 0 else "model_b") for d in length])
    # The fit says: equal models, longer answers win (beta = 1 per standard deviation).
    expectations = model_expectations(
        votes["model_a"],
        votes["model_b"],
        logits={"x": 0.0, "y": 0.0},
        style=length[None, :],
        coefficients=np.array([1.0]),
    )
    row = voter_fit_test(votes, expectations, min_votes=10).iloc[0]
    # Equal models: the linear predictor is the style term itself, one direction (rank 1).
    assert row["df"] == 1 and row["p_value"] < 1e-6


def pulled_arena(seed, attacker_votes=60):
    """Honest voters judge five models (Bradley-Terry, 10% ties, ~80 battles with m1); one
    attacker meets m1 in every one of its battles, against the three stronger models, and votes
    for it four times in five."""
    rng = np.random.default_rng(seed)
    strength = {"m0": 0.0, "m1": 0.3, "m2": 0.6, "m3": 0.9, "m4": 1.2}
    names = list(strength)
    rows = []
    for v in range(20):
        for _ in range(10):
            a, b = rng.choice(names, size=2, replace=False)
            p_a = 1 / (1 + np.exp(strength[b] - strength[a]))
            roll = rng.random()
            winner = "tie" if roll < 0.1 else ("model_a" if rng.random() < p_a else "model_b")
            rows.append((f"honest-{v}", a, b, winner))
    for i in range(attacker_votes):
        other = ("m2", "m3", "m4")[i % 3]
        rows.append(("attacker", "m1", other, "model_b" if i % 5 == 4 else "model_a"))
    return frame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_voter_that_pulls_the_fit_towards_itself_is_judged_without_its_votes(seed):
    votes = pulled_arena(seed)
    full = fitted_expectations(votes)
    pulled = voter_model_test(votes, full, min_votes=10).set_index("voter")
    # Its 48 wins are over a third of m1's evidence: the full fit moves m1 up to meet them.
    held_out = held_out_expectations(votes, full)
    held = voter_model_test(votes, held_out, min_votes=10).set_index("voter")
    assert held.loc["attacker", "p_value"] < 1e-3 * pulled.loc["attacker", "p_value"]
    assert held.loc["attacker", "p_value"] < 1e-4 and held.loc["attacker", "model"] == "m1"
    fit = voter_fit_test(votes, held_out, min_votes=10).set_index("voter")
    assert (fit.drop(index="attacker")["p_value"] > 1e-4).all()  # the honest voters pass


def test_held_out_expectations_leave_an_untested_voter_and_a_lone_model_as_they_were():
    votes = pulled_arena(0)
    # A model that only one tested voter judged: the others say nothing about it.
    votes = pd.concat(
        [
            votes,
            frame(
                [("lone", "m0", "solo", w) for w in ("model_a", "model_b") * 3]
                + [("lone", "m2", "m3", "tie")] * 6
            ),
        ],
        ignore_index=True,
    )
    full = fitted_expectations(votes)
    held = held_out_expectations(votes, full, min_votes=10)
    untested = (votes["voter"] != "attacker") & (votes["voter"] != "lone")
    small = votes["voter"].str.startswith("honest")  # 10 votes each: tested as well
    assert np.allclose(held.p_a[~small & untested], full.p_a[~small & untested], equal_nan=True)
    solo = (votes["model_b"] == "solo").to_numpy()
    # m0 moves a little without "lone"'s votes; "solo" stays: no step is taken for it.
    assert np.all(np.abs(held.design[0][solo] - full.design[0][solo]) < 0.5)


def test_the_low_rank_held_out_step_is_the_dense_one(monkeypatch):
    """Voters whose votes leave the informed models as they are take the k x k Woodbury step;
    the others take the dense pseudo-inverse: the sole judge of a thinly rated model (it
    changes the informed set), and the only voter between two groups of models (without it the
    system is singular, which only the dense step's cut handles). Both give what the dense step
    alone gives."""
    from ratings.engine import anomaly

    rng = np.random.default_rng(3)
    rows = []
    for cluster in ("x", "y"):
        models = [f"{cluster}{i:02d}" for i in range(12)]
        for v in range(60):
            for _ in range(30):
                i, j = rng.choice(12, 2, replace=False)
                winner = ("model_a", "model_b", "tie")[int(rng.integers(3))]
                rows.append((f"{cluster}-voter-{v}", models[i], models[j], winner))
    # x05 is met most: the reference of every held-out fit.
    rows += [(f"x-voter-{v}", "x05", "x06", "tie") for v in range(60) for _ in range(3)]
    rows += [("bridge", "x00", "y00", w) for w in ("model_a", "model_b", "tie") * 5]
    rows += [("thin", "x01", "lone", w) for w in ("model_a", "model_b", "tie") * 4]
    votes = frame(rows)
    full = fitted_expectations(votes)
    seen: dict[str, int] = {}
    candidates, apply = anomaly._LowRank.candidates, anomaly._LowRank.apply

    def counted_candidates(self, *args, **kwargs):
        out = candidates(self, *args, **kwargs)
        seen.update(low_rank=int(out.sum()), changed=int((~out).sum()))
        return out

    def counted_apply(self, *args, **kwargs):
        left = apply(self, *args, **kwargs)
        seen.update(left=len(left))
        return left

    monkeypatch.setattr(anomaly._LowRank, "candidates", counted_candidates)
    monkeypatch.setattr(anomaly._LowRank, "apply", counted_apply)
    both = held_out_expectations(votes, full)
    monkeypatch.setattr(anomaly._LowRank, "of", classmethod(lambda cls, information: None))
    dense = held_out_expectations(votes, full)
    # "thin" changes the informed set; "bridge" is a candidate left to the dense step.
    assert seen == {"low_rank": 121, "changed": 1, "left": 1}
    assert np.allclose(both.design[0], dense.design[0], rtol=1e-9, atol=1e-12)
    assert not np.allclose(both.design[0], full.design[0])  # the steps moved something
