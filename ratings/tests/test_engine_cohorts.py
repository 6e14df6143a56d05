"""The burst test (``ratings.engine.cohorts``) on seeded synthetic arenas."""

from __future__ import annotations

import numpy as np
import pytest

from ratings.engine.cohorts import cohort_quarantine, reference_fit

K = 10
TARGET = 5
DAY = 24.0


def _votes(rng, n, start, end, first_source, per_source, truth, *, attack=False):
    a = rng.integers(0, K, n)
    b = (a + rng.integers(1, K, n)) % K
    p = 1 / (1 + np.exp(-(truth[a] - truth[b])))
    y = (rng.random(n) < p).astype(float)
    y[rng.random(n) < 0.1] = 0.5
    if attack:
        y = np.where(a == TARGET, 1.0, np.where(b == TARGET, 0.0, y))
    source = first_source + np.arange(n) // per_source
    arrival = rng.uniform(start, end, n // per_source + 1)
    hours = arrival[np.arange(n) // per_source] + (np.arange(n) % per_source) * 0.02
    return a, b, y, hours, source


def _arena(seed, *, attack_votes=1000, attack_start=30 * DAY + 2, attack_end=30 * DAY + 3):
    rng = np.random.default_rng(seed)
    truth = np.sort(rng.normal(0, 0.46, K))[::-1]
    parts = [
        _votes(rng, 1200, 0, 30 * DAY, 0, 10, truth),  # honest, one visit each, over a month
        _votes(rng, 100, 30 * DAY, 31 * DAY, 10_000, 10, truth),  # honest on the attack's day
    ]
    if attack_votes:
        parts.append(
            _votes(rng, attack_votes, attack_start, attack_end, 20_000, 10, truth, attack=True)
        )
    a, b, y, hours, source = (np.concatenate(z) for z in zip(*parts, strict=True))
    return a, b, y, hours, source, np.arange(len(a)) < 1300


def _run(a, b, y, hours, source, **options):
    settings = {
        "n_models": K,
        "trusted_hours": 30 * DAY,
        "windows_hours": [DAY, 7 * DAY],
        "z_detect": 3.0,
        "z_release": 1.0,
        "min_votes": 10,
    }
    settings.update(options)
    return cohort_quarantine(a, b, y, hours, source, **settings)


def _target_lift(a, b, y, keep, honest):
    def rating(mask):
        counts = np.zeros((K, K))
        wins = np.zeros((K, K))
        np.add.at(counts, (a[mask], b[mask]), 1)
        np.add.at(wins, (a[mask], b[mask]), y[mask])
        theta, _ = reference_fit(counts, wins, ridge=0.01)
        return (theta[TARGET] - theta.mean()) * 400 / np.log(10)

    return rating(keep) - rating(honest)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_botnet_burst_is_held_out_and_the_honest_votes_stay(seed):
    a, b, y, hours, source, honest = _arena(seed)
    everything = np.ones(len(a), dtype=bool)
    assert _target_lift(a, b, y, everything, honest) > 100  # what the attack buys undefended
    result = _run(a, b, y, hours, source)
    assert _target_lift(a, b, y, ~result.quarantined, honest) < 20
    assert result.quarantined[honest].sum() <= 0.01 * honest.sum()
    assert any(burst.model == TARGET and burst.z_before > 3 for burst in result.bursts)
    assert all(abs(burst.z_after) <= 1.0 + 1e-9 for burst in result.bursts)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_an_honest_arena_loses_no_vote(seed):
    a, b, y, hours, source, _ = _arena(seed, attack_votes=0)
    result = _run(a, b, y, hours, source)
    assert result.windows_tested > 30
    assert result.quarantined.sum() <= 0.01 * len(a)


def test_an_aged_botnet_is_still_held_out_and_trusted_voters_go_last():
    a, b, y, hours, source, honest = _arena(0)
    attack = ~honest
    # Each of the attacker's addresses cast a first vote 31 days before: its burst is trusted.
    aged = np.unique(source[attack])
    a2 = np.r_[a, np.zeros(len(aged), dtype=np.int64)]
    b2 = np.r_[b, np.ones(len(aged), dtype=np.int64)]
    y2 = np.r_[y, np.full(len(aged), 0.5)]
    hours2 = np.r_[hours, np.full(len(aged), -DAY)]
    source2 = np.r_[source, aged]
    result = _run(a2, b2, y2, hours2, source2)
    held = result.quarantined[: len(a)]
    assert _target_lift(a, b, y, ~held, honest) < 20
    assert held[honest].sum() <= 0.02 * honest.sum()


def test_trusted_voters_in_a_bursts_window_are_held_out_after_the_others():
    a, b, y, hours, source, honest = _arena(1)
    # The attack's day also has returning voters (first seen 40 days before), honest, each
    # voting once on the target: the burst's fresh sources are held out first, and they stay.
    rng = np.random.default_rng(5)
    truth = np.sort(np.random.default_rng(1).normal(0, 0.46, K))[::-1]
    n = 200
    ra = np.full(n, TARGET)
    rb = (TARGET + rng.integers(1, K, n)) % K
    back = 50_000 + np.arange(n)
    a2 = np.r_[a, ra, ra]
    b2 = np.r_[b, rb, rb]
    won = (rng.random(n) < 1 / (1 + np.exp(-(truth[ra] - truth[rb])))).astype(float)
    y2 = np.r_[y, won, np.full(n, 0.5)]
    hours2 = np.r_[hours, np.full(n, 30 * DAY + 2.5), np.full(n, -10 * DAY)]
    source2 = np.r_[source, back, back]
    result = _run(a2, b2, y2, hours2, source2)
    returning = np.zeros(len(a2), dtype=bool)
    returning[len(a) : len(a) + n] = True
    assert result.quarantined[: len(a)][~honest].sum() > 100  # the burst is held out
    assert result.quarantined[returning].sum() < 0.1 * n


def test_a_burst_the_rest_of_the_arena_confirms_is_released():
    # The same "burst" for the target is what the established voters say too: nothing stands out.
    rng = np.random.default_rng(7)
    truth = np.zeros(K)
    truth[TARGET] = 3.0  # the target really is far better
    a, b, y, hours, source = _votes(rng, 1500, 0, 31 * DAY, 0, 10, truth)
    result = _run(a, b, y, hours, source)
    assert result.quarantined.sum() <= 0.01 * len(a)


def test_no_votes():
    empty = np.zeros(0, dtype=np.int64)
    result = _run(empty, empty, empty.astype(float), empty.astype(float), empty)
    assert result.quarantined.shape == (0,)
    assert result.bursts == []
