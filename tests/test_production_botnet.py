"""A botnet of a hundred addresses, ten votes each, against the production shape's leaderboard.

The shape is ``tests/test_production_shape.py``'s ``production`` fixture (uvicorn with
production settings, beat, PostgreSQL and Redis of the test's own, the demo loaded and rated:
its 1,751 real expert votes are the honest arena). The web server believes X-Forwarded-For from
loopback (``ARENA_FORWARDED_ALLOW_IPS``, as behind a proxy), so each session of the botnet comes
from an address of its own: a hundred sources, ten votes each, too few for any per-voter test
and each under the per-source bound. Each session signs up as the page does (terms, the
proof-of-work challenge), then plays pool battles: it tells the target by its published answers
(the demo's pool is MT-bench's) and votes for it wherever it is shown; elsewhere it votes as
the public leaderboard predicts, to blend in.

What holds it (docs/integrity.md, "Bursts of new sources"): the worker's refit after the votes
tests the burst of new sources against every other vote and holds out its largest contributors
on the target before it fits. The target then moves at most one rank and 20 points, and none of
the demo's votes is held out.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import pytest

from tests.test_production_rigging import (
    Visitor,
    _leaderboard,
    _next_snapshot,
    _normalised,
    _published_answers,
    _recogniser,
)
from tests.test_production_shape import (  # noqa: F401  (fixtures)
    ProductionShape,
    production,
)

pytestmark = [
    pytest.mark.production,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.timeout(900),
]

ADDRESSES = 100
VOTES_EACH = 10
MAX_POINTS = 20.0
MAX_RANKS = 1


@pytest.fixture
def production_env() -> dict[str, str]:
    # Loopback is the proxy: each session's X-Forwarded-For is its address. The per-address
    # limits then apply to each bot as to any visitor; the session limits are production's.
    return {"ARENA_FORWARDED_ALLOW_IPS": "127.0.0.1"}


@dataclass
class Bot(Visitor):
    """A session from an address of its own."""

    address: str = ""

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        self.opener.addheaders = [("X-Forwarded-For", self.address)]
        return super().call(method, path, body)


def _board(
    document: dict[str, Any], among: set[str] | None = None
) -> tuple[dict[str, float], dict[str, int]]:
    """Ratings and positions (1 = best) of the rated models in a ``/leaderboard.json`` (of
    those ``among``), each rating taken from their mean: the scale's own centre moves when new
    models join the mean that sets it, which is no model's lift."""
    ratings = {
        row["model"]: float(row["rating"])
        for row in document["models"]
        if among is None or row["model"] in among
    }
    centre = sum(ratings.values()) / len(ratings)
    ratings = {slug: rating - centre for slug, rating in ratings.items()}
    order = sorted(ratings, key=lambda slug: -ratings[slug])
    return ratings, {slug: i + 1 for i, slug in enumerate(order)}


def _botnet(shape: ProductionShape, target: str, public: dict[str, float]) -> dict[str, int]:
    recognise = _recogniser()
    rng = random.Random(12)
    seen = {"votes": 0, "for_target": 0}
    for i in range(ADDRESSES):
        bot = Bot(shape.url, address=f"198.51.{100 + i // 200}.{i % 200 + 1}")
        bot.sign_up()
        for _ in range(VOTES_EACH):
            status, battle = bot.call("POST", "/api/battles", {})
            assert status == 201, battle
            first = battle["turns"][0]
            side_of = {s: recognise.get(_normalised(first[s]["content"])) for s in "ab"}
            if target in side_of.values():
                winner = "model_a" if side_of["a"] == target else "model_b"
                seen["for_target"] += 1
            elif side_of["a"] in public and side_of["b"] in public:
                winner = "model_a" if public[side_of["a"]] >= public[side_of["b"]] else "model_b"
            else:
                winner = rng.choice(["model_a", "model_b"])
            status, voted = bot.call(
                "POST", f"/api/battles/{battle['id']}/vote", {"winner": winner}
            )
            assert status == 201, voted
            seen["votes"] += 1
    return seen


def test_a_botnet_of_a_hundred_addresses_moves_its_target_at_most_a_rank_and_20_points(
    production,  # noqa: F811
):
    shape, database = production
    baseline = _leaderboard(shape)
    ratings, positions = _board(baseline)
    # The target: the pool model in the middle of the board's rated ones, with room to climb.
    pooled = [m for m in sorted(positions, key=positions.__getitem__) if m in _published_answers()]
    target = pooled[len(pooled) // 2]
    demo_high_water = database.query("SELECT max(id) FROM arena_vote")[0][0]

    seen = _botnet(shape, target, ratings)
    assert seen["votes"] == ADDRESSES * VOTES_EACH
    assert seen["for_target"] >= 50  # the target was shown and recognised often enough

    worker = shape.start_worker()
    after = _next_snapshot(shape, worker, baseline["snapshot"]["id"])
    # The models the honest arena rates, compared among themselves (the demo's votes rate 6;
    # the other pool models are rated by the botnet's votes alone, and are not compared).
    new_ratings, new_positions = _board(after, among=set(ratings))
    lift = new_ratings[target] - ratings[target]
    climbed = positions[target] - new_positions[target]
    held_out = after["snapshot"]["excluded"]["by_reason"].get("cohort_burst", 0)
    assert held_out > 0, json.dumps(after["snapshot"]["excluded"])
    assert lift <= MAX_POINTS, (target, lift, held_out, shape.manage("flag_cohorts", "--dry-run"))
    assert climbed <= MAX_RANKS, (target, positions[target], new_positions[target])
    # The honest arena keeps every vote: none of the demo's is held out as a burst.
    [(honest_held,)] = database.query(
        "SELECT count(*) FROM arena_vote WHERE id <= %s AND flags::text LIKE %s",
        demo_high_water,
        "%cohort_burst%",
    )
    assert honest_held == 0
    # Most of what the botnet gave the target is what was held out.
    [(bot_held,)] = database.query(
        "SELECT count(*) FROM arena_vote WHERE id > %s AND flags::text LIKE %s",
        demo_high_water,
        "%cohort_burst%",
    )
    assert bot_held == held_out
    print(  # the figures, for the run's log
        f"botnet: {seen['votes']} votes, {seen['for_target']} for {target}; held out {held_out}; "
        f"{target} moved {lift:+.1f} points, {climbed:+d} ranks among the demo's rated models"
    )
