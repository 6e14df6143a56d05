"""Whether any run is open, as every pool battle asks it (``arena.pool_cache``, through the
environment's battle source): a run opened or closed starts a new generation, a run's counters
saved do not."""

import pytest

from arena import pool_cache
from arena.tests.factories import pool_of
from environment.tests.env_helpers import make_run

pytestmark = pytest.mark.django_db


def test_opening_an_env_run_is_seen_by_the_next_pool_request(db):
    pool_of(n_models=2, n_prompts=1)
    kept = pool_cache.pool_cache()
    assert kept.env_runs_open() is False
    make_run()
    assert pool_cache.pool_cache().env_runs_open() is True


def test_a_run_counter_saved_does_not_end_the_copies(db):
    run = make_run()
    kept = pool_cache.pool_cache()
    assert kept.env_runs_open() is True
    token = kept.tokens["env"]
    run.save(update_fields=["reward_seq"])
    assert pool_cache.pool_cache().tokens["env"] == token
    run.state = run.State.CLOSED
    run.save(update_fields=["state"])
    assert pool_cache.pool_cache().tokens["env"] != token
    assert pool_cache.pool_cache().env_runs_open() is False
