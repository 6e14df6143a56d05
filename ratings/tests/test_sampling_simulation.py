"""Active pair sampling narrows the intervals faster than uniform sampling (a synthetic arena),
and each snapshot hands the arena the statistics the draw reads."""

import random
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from arena.sampling.rule import SamplingStats, draw_pair, pair_probabilities, se_from_interval
from arena.sampling.stats import sampling_stats, sampling_stats_snapshot_id
from arena.tests.factories import ArenaModelFactory
from ratings import services
from ratings.engine import rate

# Eight models that have been in the arena a while, three that just arrived; a few close pairs
# (1000/1010/1020, 1150/1160, 1300/1305).
TRUE_RATINGS = [1000, 1010, 1020, 1100, 1150, 1160, 1250, 1300, 1305, 1400, 1200]
N_OLD = 8
HISTORY = 4000  # battles among the old models before the new ones arrive
BATTLES = 1500  # then, the same number of battles for both policies
REFIT_EVERY = 250
FLOOR = 0.2


def _fit(rows: list[tuple[str, str, str]]):
    frame = pd.DataFrame(rows, columns=["model_a", "model_b", "winner"])
    return rate(frame, style_control=False, ci="sandwich", with_online_elo=False)


def _simulate(*, active: bool, seed: int) -> list[float]:
    """The final 95% interval widths of every model after ``BATTLES`` more battles."""
    rng = random.Random(seed)
    truth = {f"m{i}": r for i, r in enumerate(TRUE_RATINGS)}
    names = list(truth)

    def battle(a: str, b: str) -> tuple[str, str, str]:
        p_a = 1 / (1 + 10 ** ((truth[b] - truth[a]) / 400))
        return (a, b, "model_a" if rng.random() < p_a else "model_b")

    rows = [battle(*rng.sample(names[:N_OLD], 2)) for _ in range(HISTORY)]
    weights = dict.fromkeys(names, 1.0)
    stop = len(rows) + BATTLES
    while len(rows) < stop:
        stats = None
        if active:  # the latest "snapshot": the engine's fit and the pair counts so far
            fitted = _fit(rows)
            counts = Counter(tuple(sorted((a, b))) for a, b, _ in rows)
            stats = SamplingStats(
                se={
                    m.model: se_from_interval(m.rating_lower, m.rating_upper) for m in fitted.models
                },
                counts=dict(counts),
            )
        probabilities = pair_probabilities(weights, stats, floor=FLOOR if active else 0.0)
        for _ in range(min(REFIT_EVERY, stop - len(rows))):
            rows.append(battle(*draw_pair(probabilities, rng)))
    final = _fit(rows)
    assert len(final.models) == len(names)
    return [m.rating_upper - m.rating_lower for m in final.models]


def test_active_sampling_gives_narrower_intervals_than_uniform_for_the_same_battles():
    seeds = (1, 2)
    uniform = [_simulate(active=False, seed=s) for s in seeds]
    active = [_simulate(active=True, seed=s) for s in seeds]
    for u, a in zip(uniform, active, strict=True):
        # Mean width and widest interval both narrower (the new models' intervals shrink first).
        assert np.mean(a) < np.mean(u)
        assert max(a) < 0.9 * max(u)


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10


def test_a_snapshot_hands_the_arena_its_standard_errors_and_pair_counts(
    make_vote, rated_models, django_capture_on_commit_callbacks
):
    private = ArenaModelFactory(slug="secret-variant", is_public=False)
    for i in range(6):
        make_vote(private, rated_models[i % 3], "model_a" if i % 2 else "model_b")
    with django_capture_on_commit_callbacks(execute=True):
        snapshot = services.snapshot_refresh().snapshot
    assert snapshot is not None
    stats = sampling_stats()
    assert sampling_stats_snapshot_id() == snapshot.pk
    assert stats is not None
    ids = {m.slug: m.pk for m in [*rated_models, private]}
    # Private variants are drawn too, so their statistics are handed over as well.
    assert set(stats.se) == set(ids.values())
    assert all(value > 0 for value in stats.se.values())
    alpha, beta = ids["alpha"], ids["beta"]
    n_alpha_beta = next(
        n for a, b, n in snapshot.payload["sampling"]["counts"] if {a, b} == {"alpha", "beta"}
    )
    assert stats.n(alpha, beta) == stats.n(beta, alpha) == n_alpha_beta > 0


def test_a_sweep_republishes_the_statistics_after_a_cache_flush(rated_models):
    from django.core.cache import cache

    first = services.snapshot_refresh()
    cache.clear()
    assert sampling_stats() is None
    again = services.snapshot_refresh()
    assert not again.created and again.snapshot == first.snapshot
    assert sampling_stats_snapshot_id() == first.snapshot.pk
