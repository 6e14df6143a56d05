"""Active pair sampling: the rule (arena.sampling.rule), the stored statistics and the draws."""

import math
import random
from collections import Counter
from datetime import UTC, datetime

import pytest

from arena.sampling.rule import SamplingStats, pair_probabilities, variance_reduction
from arena.sampling.stats import pair_probabilities_now, sampling_policy
from arena.sampling.store import sampling_stats_store
from arena.services.battles import battle_start_pool
from arena.tests.factories import pool_of


def test_weights_are_proportional_to_the_variance_reduction_of_one_more_battle():
    se = {"a": 10.0, "b": 20.0, "c": 30.0}
    counts = {("a", "b"): 4, ("a", "c"): 9, ("b", "c"): 0}
    probabilities = pair_probabilities(
        dict.fromkeys(se, 1.0), SamplingStats(se=se, counts=counts), floor=0.0
    )

    def reduction(x: str, y: str, n: int) -> float:
        # sqrt(S/n) - sqrt(S/(n+1)) with S/n the variance of the pair's rating difference.
        variance = se[x] ** 2 + se[y] ** 2
        if n == 0:
            return math.sqrt(variance)
        big_s = n * variance
        return math.sqrt(big_s / n) - math.sqrt(big_s / (n + 1))

    expected = {
        ("a", "b"): reduction("a", "b", 4),
        ("a", "c"): reduction("a", "c", 9),
        ("b", "c"): reduction("b", "c", 0),
    }
    total = sum(expected.values())
    assert probabilities.keys() == expected.keys()
    for pair, value in expected.items():
        assert probabilities[pair] == pytest.approx(value / total)
    # Fewer battles and wider intervals weigh more: the pair that never met comes first.
    assert max(probabilities, key=probabilities.__getitem__) == ("b", "c")


def test_variance_reduction_shrinks_with_more_battles():
    values = [variance_reduction(100.0, n) for n in range(6)]
    assert values == sorted(values, reverse=True)
    assert values[0] == 10.0 and values[1] == pytest.approx(10.0 * (1 - math.sqrt(0.5)))


def test_pair_counts_are_read_in_either_order():
    stats = SamplingStats(se={1: 5.0, 2: 5.0}, counts={(2, 1): 7})
    assert stats.n(1, 2) == stats.n(2, 1) == 7


def test_the_floor_keeps_every_pair_at_least_its_share():
    # One pair has met a thousand times with tiny intervals; the others never met.
    se = {m: 40.0 for m in "abcd"} | {"a": 0.1, "b": 0.1}
    counts = {("a", "b"): 1000}
    floor = 0.3
    probabilities = pair_probabilities(
        dict.fromkeys("abcd", 1.0), SamplingStats(se=se, counts=counts), floor=floor
    )
    assert len(probabilities) == 6
    assert sum(probabilities.values()) == pytest.approx(1.0)
    assert min(probabilities.values()) >= floor / 6 - 1e-12
    assert probabilities[("a", "b")] == pytest.approx(floor / 6, rel=1e-3)
    # Without the floor the well-measured pair all but disappears.
    bare = pair_probabilities(
        dict.fromkeys("abcd", 1.0), SamplingStats(se=se, counts=counts), floor=0.0
    )
    assert bare[("a", "b")] < 1e-3


def test_sampling_weights_multiply_the_active_part_and_zero_weights_are_never_drawn():
    se = dict.fromkeys("abc", 10.0) | {"z": 10.0}
    counts = {("a", "b"): 5, ("a", "c"): 5, ("b", "c"): 5}
    stats = SamplingStats(se=se, counts=counts)
    probabilities = pair_probabilities({"a": 3.0, "b": 1.0, "c": 1.0, "z": 0.0}, stats, floor=0.0)
    assert set(probabilities) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert probabilities[("a", "b")] == pytest.approx(3 * probabilities[("b", "c")])


def test_a_model_the_snapshot_did_not_rate_takes_the_widest_interval_known():
    stats = SamplingStats(se={"a": 5.0, "b": 25.0}, counts={("a", "b"): 3})
    probabilities = pair_probabilities(dict.fromkeys("abn", 1.0), stats, floor=0.0)
    # "n" is new: its pairs never met and take se 25, so they outweigh the pair that met.
    assert probabilities[("a", "n")] > probabilities[("a", "b")]
    assert probabilities[("b", "n")] > probabilities[("a", "n")]


def test_without_statistics_the_draw_follows_the_weights():
    probabilities = pair_probabilities({"a": 2.0, "b": 1.0, "c": 1.0}, None, floor=0.0)
    assert probabilities[("a", "b")] == pytest.approx(2 / 5)
    assert probabilities[("b", "c")] == pytest.approx(1 / 5)


def _favour_one_pair(models):
    """Statistics that make the first two models' pair all but the only one worth a battle."""
    a, b, *rest = models
    sampling_stats_store(
        snapshot_id=7,
        computed_at=datetime(2026, 11, 30, 12, tzinfo=UTC),
        se={a.slug: 50.0, b.slug: 50.0} | {m.slug: 0.01 for m in rest},
        counts=[(a.slug, b.slug, 0)]
        + [(x.slug, y.slug, 10_000) for x in (a, b) for y in rest]
        + [(x.slug, y.slug, 10_000) for i, x in enumerate(rest) for y in rest[i + 1 :]],
    )


def test_pool_battles_follow_the_active_rule_from_the_stored_statistics(db, settings):
    settings.ARENA_ACTIVE_SAMPLING = True
    settings.ARENA_SAMPLING_FLOOR = 0.2
    models, _ = pool_of(n_models=4, n_prompts=2)
    _favour_one_pair(models)
    rng = random.Random(5)
    pairs = Counter(
        frozenset((b.model_a_id, b.model_b_id))
        for b in (battle_start_pool(session_key="s", rng=rng).battle for _ in range(200))
    )
    favoured = pairs[frozenset((models[0].id, models[1].id))]
    # 0.8 of the draws plus the floor's sixth of 0.2: about 83%; uniform would give a sixth.
    assert favoured > 0.7 * 200
    assert len(pairs) == 6  # the floor still reaches every pair


def test_switched_off_pool_battles_follow_the_sampling_weights_only(db, settings):
    settings.ARENA_ACTIVE_SAMPLING = False
    models, _ = pool_of(n_models=4, n_prompts=2)
    _favour_one_pair(models)
    rng = random.Random(5)
    pairs = Counter(
        frozenset((b.model_a_id, b.model_b_id))
        for b in (battle_start_pool(session_key="s", rng=rng).battle for _ in range(240))
    )
    favoured = pairs[frozenset((models[0].id, models[1].id))]
    assert favoured < 0.3 * 240  # equal weights: a sixth of the battles, whatever the statistics
    expected = pair_probabilities_now({m.id: 1.0 for m in models})
    assert all(p == pytest.approx(1 / 6) for p in expected.values())


def test_the_statistics_are_stored_by_model_id_and_describe_the_policy(db, settings):
    settings.ARENA_ACTIVE_SAMPLING = True
    settings.ARENA_SAMPLING_FLOOR = 0.25
    models, _ = pool_of(n_models=3, n_prompts=1)
    _favour_one_pair(models)
    policy = sampling_policy()
    assert policy.active and policy.floor == 0.25
    assert policy.snapshot_id == 7
    assert policy.computed_at == datetime(2026, 11, 30, 12, tzinfo=UTC)
    probabilities = pair_probabilities_now({m.id: 1.0 for m in models})
    assert max(probabilities, key=probabilities.__getitem__) == (models[0].id, models[1].id)


def test_live_battles_draw_their_pair_by_the_active_rule(db, settings):
    from arena.live.draw import draw_pair as live_draw_pair
    from arena.tests.factories import ArenaModelFactory, ProviderFactory

    settings.ARENA_ACTIVE_SAMPLING = True
    settings.ARENA_SAMPLING_FLOOR = 0.2
    provider = ProviderFactory()
    models = [ArenaModelFactory(provider=provider, upstream_model_id=f"up-{i}") for i in range(4)]
    _favour_one_pair(models)
    rng = random.Random(9)
    pairs = Counter(frozenset(m.pk for m in live_draw_pair(rng)) for _ in range(200))
    assert pairs[frozenset((models[0].pk, models[1].pk))] > 0.7 * 200
    settings.ARENA_ACTIVE_SAMPLING = False
    pairs = Counter(frozenset(m.pk for m in live_draw_pair(rng)) for _ in range(240))
    assert pairs[frozenset((models[0].pk, models[1].pk))] < 0.3 * 240
