"""RATINGS_COUNT_REACTIONS: reactions given before the reveal decide a tie, in both refit paths."""

import pyarrow.parquet as pq
import pytest
from django.db import transaction

from arena.models import Reaction
from arena.tests.factories import ArenaModelFactory
from ratings import vote_sources

pytestmark = pytest.mark.django_db


@pytest.fixture
def ties(make_vote):
    """Four votes: a tie and a both-bad the reactions decide, a tie whose liked reaction came
    after the reveal, and a decisive vote the reactions contradict."""
    a, b = ArenaModelFactory(slug="north"), ArenaModelFactory(slug="south")
    tie = make_vote(a, b, "tie")
    bad = make_vote(a, b, "tie (bothbad)")
    late = make_vote(a, b, "tie")
    decisive = make_vote(a, b, "model_a")
    for vote, liked_side, after_reveal in (
        (tie, "a", False),
        (bad, "b", False),
        (late, "a", True),
        (decisive, "b", False),
    ):
        other = "b" if liked_side == "a" else "a"
        Reaction.objects.create(
            battle=vote.battle, side=liked_side, liked=True, after_reveal=after_reveal
        )
        Reaction.objects.create(battle=vote.battle, side=other, liked=False)
    return [tie, bad, late, decisive]


def winners_in_memory() -> list[str]:
    return vote_sources.rating_battles()["winner"].tolist()


def winners_in_parquet(tmp_path) -> list[str]:
    with transaction.atomic():
        vote_sources.rating_battles_parquet(tmp_path / "v.parquet", batch_rows=2)
    return [str(w) for w in pq.read_table(tmp_path / "v.parquet").column("winner").to_pylist()]


CAST = ["tie", "tie (bothbad)", "tie", "model_a"]
DECIDED = ["model_a", "model_b", "tie", "model_a"]


def test_off_by_default_every_vote_is_rated_as_cast(ties, settings):
    assert settings.RATINGS_COUNT_REACTIONS is False
    assert winners_in_memory() == CAST


def test_on_opposite_reactions_before_the_reveal_decide_ties_and_nothing_else(ties, settings):
    settings.RATINGS_COUNT_REACTIONS = True
    assert winners_in_memory() == DECIDED


@pytest.mark.postgres  # the out-of-core path reads the votes with PostgreSQL's COPY
@pytest.mark.parametrize(("count", "expected"), [(False, CAST), (True, DECIDED)])
def test_the_parquet_path_rates_the_same_winners_as_the_in_memory_one(
    ties, settings, tmp_path, count, expected
):
    settings.RATINGS_COUNT_REACTIONS = count
    assert winners_in_parquet(tmp_path) == expected == winners_in_memory()


def test_a_single_thumbs_up_without_a_thumbs_down_leaves_the_tie(make_vote, settings):
    settings.RATINGS_COUNT_REACTIONS = True
    vote = make_vote(ArenaModelFactory(), ArenaModelFactory(), "tie")
    Reaction.objects.create(battle=vote.battle, side="a", liked=True)
    Reaction.objects.create(battle=vote.battle, side="b", liked=True)
    assert winners_in_memory() == ["tie"]


def test_a_counted_reaction_changed_after_the_vote_refits_the_tie_it_decided(
    make_vote, settings, django_capture_on_commit_callbacks
):
    from arena.identity import session_hash
    from arena.services.reactions import reaction_set
    from arena.signals import counted_reaction_changed
    from ratings import selectors, services

    settings.RATINGS_COUNT_REACTIONS = True
    north, south = ArenaModelFactory(slug="north"), ArenaModelFactory(slug="south")
    tie = make_vote(north, south, "tie")
    tie.battle.session_hash = session_hash("session-1")
    tie.battle.save(update_fields=["session_hash"])
    Reaction.objects.create(battle=tie.battle, side="a", liked=True)
    Reaction.objects.create(battle=tie.battle, side="b", liked=False)
    make_vote(north, south, "model_b")
    first = services.snapshot_refresh().snapshot
    assert first.payload["reaction_decided"] == tie.pk
    assert services.snapshot_refresh().created is False  # nothing changed

    sent = []

    def receiver(**kwargs):
        sent.append(kwargs["battle_id"])

    counted_reaction_changed.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            # The visitor takes back, after the reveal, the thumbs down that decided the tie.
            reaction_set(battle_id=tie.battle.pk, session_key="session-1", side="b", liked=None)
        assert sent == [tie.battle.pk]
        with django_capture_on_commit_callbacks(execute=True):
            # The thumbs up set again after the reveal: it stops counting too, said once.
            reaction_set(battle_id=tie.battle.pk, session_key="session-1", side="a", liked=True)
            reaction_set(battle_id=tie.battle.pk, session_key="session-1", side="a", liked=False)
        assert sent == [tie.battle.pk, tie.battle.pk]
    finally:
        counted_reaction_changed.disconnect(receiver)
    assert winners_in_memory() == ["tie", "model_b"]
    # With a broker the refit the change queued waits for a worker, so it runs here; with eager
    # tasks (no Redis) it ran already, and this call finds the votes covered. Either way the
    # newest snapshot is a new one, written because the votes' mark saw the change.
    services.snapshot_refresh()
    latest = selectors.snapshot_latest()
    assert latest is not None and latest.pk != first.pk
    assert latest.payload["reaction_decided"] == 0
