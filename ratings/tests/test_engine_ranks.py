"""Rank spreads and tiers from rating intervals (``ratings.engine.ranks``)."""

from __future__ import annotations

import numpy as np
import pytest

from ratings.engine import leaderboard_positions, rank_spreads, rate, tiers
from ratings.tests.test_engine_bt import battles


def arrays(*intervals: tuple[float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ratings (interval midpoints), lower and upper bounds of intervals given best first."""
    lower = np.array([lo for lo, _ in intervals], dtype=float)
    upper = np.array([up for _, up in intervals], dtype=float)
    return (lower + upper) / 2, lower, upper


def test_the_spread_runs_from_the_best_rank_to_the_worst_the_intervals_allow():
    _, lower, upper = arrays((1100, 1200), (1050, 1150), (900, 1000), (850, 1060))
    best, worst = rank_spreads(lower, upper)
    # Best: 1 + those whose lower bound is above its upper bound; worst: N - those whose upper
    # bound is below its lower bound.
    assert best.tolist() == [1, 1, 3, 2]
    assert worst.tolist() == [2, 3, 4, 4]


def test_one_model_is_first_of_one_in_tier_one():
    rating, lower, upper = arrays((900, 1100))
    positions = leaderboard_positions(rating, lower, upper, np.array([False]))
    assert positions.rank.tolist() == [1]
    assert positions.rank_worst.tolist() == [1]
    assert positions.tier.tolist() == [1]


def test_overlapping_intervals_all_share_every_rank_and_one_tier():
    rating, lower, upper = arrays((990, 1110), (980, 1100), (970, 1090), (960, 1080))
    positions = leaderboard_positions(rating, lower, upper, np.zeros(4, dtype=bool))
    assert positions.rank.tolist() == [1, 1, 1, 1]
    assert positions.rank_worst.tolist() == [4, 4, 4, 4]
    assert positions.tier.tolist() == [1, 1, 1, 1]


def test_separated_intervals_have_one_rank_each_and_one_tier_each():
    rating, lower, upper = arrays((1300, 1400), (1100, 1200), (900, 1000), (700, 800))
    positions = leaderboard_positions(rating, lower, upper, np.zeros(4, dtype=bool))
    assert positions.rank.tolist() == [1, 2, 3, 4]
    assert positions.rank_worst.tolist() == [1, 2, 3, 4]
    assert positions.tier.tolist() == [1, 2, 3, 4]


def test_a_tier_starts_at_the_first_model_below_the_tier_tops_lower_bound():
    # Top: [1100, 1200]. The second overlaps it; the third (upper 1090) is below its lower
    # bound and starts tier 2, and the fourth overlaps the third, not the top.
    rating, lower, upper = arrays((1100, 1200), (1080, 1160), (1000, 1090), (990, 1085))
    tier = leaderboard_positions(rating, lower, upper, np.zeros(4, dtype=bool)).tier
    assert tier.tolist() == [1, 1, 2, 2]


def test_a_wide_interval_below_a_new_tier_stays_in_that_tier():
    # The fourth overlaps tier 1's top too, but tiers are contiguous in rating order: once
    # tier 2 has started, it joins tier 2 (it overlaps tier 2's top).
    rating, lower, upper = arrays((1100, 1200), (1000, 1090), (990, 1080), (800, 1150))
    tier = leaderboard_positions(rating, lower, upper, np.zeros(4, dtype=bool)).tier
    assert tier.tolist() == [1, 2, 2, 2]


def test_tiers_follow_the_rating_order_whatever_the_input_order():
    rating, lower, upper = arrays((1300, 1400), (1100, 1200), (900, 1000))
    shuffle = np.array([2, 0, 1])
    tier = tiers(rating[shuffle], lower[shuffle], upper[shuffle], np.zeros(3, dtype=bool))
    assert tier.tolist() == [3, 1, 2]


def test_tied_ratings_are_ordered_as_given():
    # Equal ratings: the first given is the tier's top; its bounds decide who joins it.
    rating = np.array([1000.0, 1000.0, 1000.0])
    lower = np.array([990.0, 900.0, 850.0])
    upper = np.array([1010.0, 1100.0, 989.0])
    assert tiers(rating, lower, upper, np.zeros(3, dtype=bool)).tolist() == [1, 1, 2]
    reordered = tiers(rating[[1, 0, 2]], lower[[1, 0, 2]], upper[[1, 0, 2]], np.zeros(3, bool))
    assert reordered.tolist() == [1, 1, 1]


def test_a_preliminary_model_has_no_tier_and_its_spread_starts_at_its_rank():
    # The preliminary second model's interval is above everyone's: it is still ranked after
    # the established ones (rank 2, as they share rank 1), so its spread is that rank alone.
    rating, lower, upper = arrays((1100, 1200), (1300, 1500), (1050, 1150), (600, 1400))
    preliminary = np.array([False, True, False, True])
    positions = leaderboard_positions(rating, lower, upper, preliminary)
    assert positions.rank.tolist() == [1, 2, 1, 2]
    assert positions.rank_worst.tolist() == [2, 2, 2, 4]
    assert positions.tier.tolist() == [1, 0, 1, 0]


def test_only_preliminary_models_are_ranked_among_themselves_without_tiers():
    rating, lower, upper = arrays((1100, 1200), (900, 1000))
    positions = leaderboard_positions(rating, lower, upper, np.ones(2, dtype=bool))
    assert positions.rank.tolist() == [1, 2]
    assert positions.rank_worst.tolist() == [1, 2]
    assert positions.tier.tolist() == [0, 0]


def test_no_models_give_empty_positions():
    empty = np.zeros(0)
    positions = leaderboard_positions(empty, empty, empty, np.zeros(0, dtype=bool))
    assert positions.rank.size == positions.rank_worst.size == positions.tier.size == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_a_fit_gives_each_row_a_spread_around_its_rank_and_tiers_in_order(seed):
    result = rate(battles(n=600, p=6, style=False, seed=seed), style_control=False)
    ranks = [m.rank for m in result.models]
    worst = [m.rank_worst for m in result.models]
    tier = [m.tier for m in result.models]
    assert all(r <= w <= len(ranks) for r, w in zip(ranks, worst, strict=True))
    assert tier[0] == 1 and tier == sorted(tier)
    assert all(b - a in (0, 1) for a, b in zip(tier, tier[1:], strict=False))
    row = result.models[0].to_dict()
    assert row["rank_worst"] == worst[0] and row["tier"] == 1
