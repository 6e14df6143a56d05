import hashlib
import hmac
import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from answer_style import conv_metadata, style_counts
from arena import rows
from arena.errors import ALREADY_VOTED_MESSAGE, ArenaError
from arena.models import Battle, Vote
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.signals import vote_recorded
from arena.tests.factories import ArenaModelFactory, BattleFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def voter():
    terms_accept(voter_id="voter-1")
    return "voter-1"


def record(battle, voter, **overrides):
    kwargs = {
        "battle_id": battle.id,
        "session_key": "session-1",  # BattleFactory's session
        "voter_id": voter,
        "winner": "model_a",
        "ip": "203.0.113.9",
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64)",
    }
    kwargs.update(overrides)
    return vote_record(**kwargs).vote


def test_vote_is_stored_with_style_counts_of_both_sides_and_closes_the_battle(voter):
    battle = BattleFactory()
    vote = record(battle, voter)
    battle.refresh_from_db()
    assert battle.state == Battle.State.VOTED
    assert vote.winner == "model_a"
    style = vote.style
    assert style["header_count_a"]["h1"] == 1
    assert style["list_count_a"]["unordered"] == 2
    assert style["bold_count_a"]["**"] == 1
    assert style["header_count_b"]["h1"] == 0
    assert style["sum_assistant_a_tokens"] > 0 and style["sum_assistant_b_tokens"] > 0


def test_vote_sums_the_style_counts_saved_with_each_answer(voter):
    """Answers keep their counts when saved; the vote sums those (A's and B's apart)."""
    battle = BattleFactory(messages={"a": "# One\n\n## Two\n\n1. x", "b": "- x\n- y\n\n__u__"})
    for message in battle.messages.all():
        message.style = style_counts(message.content)
        message.save(update_fields=["style"])
    [a] = battle.messages.filter(side="a")
    [b] = battle.messages.filter(side="b")
    vote = record(battle, voter)
    assert vote.style == conv_metadata([a.style], [b.style])
    assert vote.style["header_count_a"]["h2"] == 1 and vote.style["list_count_b"]["unordered"] == 2


def test_vote_stores_a_salted_ip_hash_never_the_ip(voter, settings):
    settings.ARENA_IP_HASH_SALT = "pepper-for-this-test"
    vote = record(BattleFactory(), voter, ip="203.0.113.9")
    expected = hmac.new(b"pepper-for-this-test", b"203.0.113.9", hashlib.sha256).hexdigest()[:32]
    assert vote.ip_hash == expected
    assert vote.ip_hash != "203.0.113.9"
    other = record(BattleFactory(), voter, ip="203.0.113.10")
    assert other.ip_hash != vote.ip_hash
    assert vote.user_agent_class == "browser"


@pytest.mark.parametrize("winner", ["model_a", "model_b", "tie", "tie (bothbad)"])
def test_each_public_arena_winner_is_accepted(voter, winner):
    assert record(BattleFactory(), voter, winner=winner).winner == winner


@pytest.mark.parametrize("winner", [None, "", "a", "MODEL_A", 1, ["model_a"]])
def test_unknown_winner_is_a_400_naming_the_field(voter, winner):
    battle = BattleFactory()
    with pytest.raises(ArenaError) as exc:
        record(battle, voter, winner=winner)
    assert (exc.value.status, exc.value.field) == (400, "winner")
    assert exc.value.message == "winner must be one of model_a, model_b, tie, tie (bothbad)."
    battle.refresh_from_db()
    assert battle.state == Battle.State.READY and not Vote.objects.exists()


def test_second_vote_is_a_409_and_keeps_the_first(voter):
    battle = BattleFactory()
    record(battle, voter, winner="model_b")
    with pytest.raises(ArenaError) as exc:
        record(battle, voter, winner="model_a")
    assert exc.value.status == 409 and exc.value.code == "already_voted"
    assert exc.value.message == ALREADY_VOTED_MESSAGE
    assert Vote.objects.get().winner == "model_b"


def test_a_vote_refused_by_the_one_vote_constraint_is_the_same_409(voter, monkeypatch):
    """A racing second vote that passed the checks meets the database's constraint instead."""
    insert = rows.insert

    def racing_insert(instance, *, using):
        # Another vote on the battle lands between the checks and this vote's insert.
        Vote.objects.create(battle=instance.battle, winner="tie", voter_id="racer")
        insert(instance, using=using)

    monkeypatch.setattr(rows, "insert", racing_insert)
    battle = BattleFactory()
    with pytest.raises(ArenaError) as exc:
        record(battle, voter)
    assert (exc.value.status, exc.value.code) == (409, "already_voted")
    assert exc.value.message == ALREADY_VOTED_MESSAGE
    battle.refresh_from_db()
    assert battle.state == Battle.State.READY


def test_a_battle_marked_voted_is_already_voted_even_without_its_vote_row(voter):
    """The battle's state alone refuses a second vote (say its vote was deleted by staff)."""
    battle = BattleFactory(state=Battle.State.VOTED)
    with pytest.raises(ArenaError) as exc:
        record(battle, voter)
    assert (exc.value.status, exc.value.code) == (409, "already_voted")
    assert not Vote.objects.exists()


def test_vote_from_another_session_is_a_404_like_an_unknown_battle(voter):
    battle = BattleFactory(session_key="owner")
    with pytest.raises(ArenaError) as exc:
        record(battle, voter, session_key="intruder")
    assert (exc.value.status, exc.value.code) == (404, "not_found")
    assert exc.value.message == "Battle not found."
    assert not Vote.objects.exists()


def test_unknown_battle_is_a_404(voter):
    import uuid

    with pytest.raises(ArenaError) as exc:
        vote_record(battle_id=uuid.uuid4(), session_key="s", voter_id=voter, winner="tie")
    assert (exc.value.status, exc.value.message) == (404, "Battle not found.")
    with pytest.raises(ArenaError) as exc:
        vote_record(battle_id="not-a-uuid", session_key="s", voter_id=voter, winner="tie")
    assert exc.value.status == 404


@pytest.mark.parametrize(
    "state", [Battle.State.STREAMING, Battle.State.ABORTED, Battle.State.ERRORED]
)
def test_battle_that_is_not_ready_cannot_be_voted(voter, state):
    battle = BattleFactory(state=state)
    with pytest.raises(ArenaError) as exc:
        record(battle, voter)
    assert exc.value.status == 409 and exc.value.code == "not_votable"
    label = battle.get_state_display().lower()
    assert exc.value.message == f"This battle cannot be voted on (it is {label})."


def test_vote_needs_the_terms_accepted_first():
    battle = BattleFactory()
    with pytest.raises(ArenaError) as exc:
        record(battle, "stranger")
    assert (exc.value.status, exc.value.code, exc.value.field) == (403, "terms_required", "terms")
    assert exc.value.message == "Accept the terms before voting."
    terms_accept(voter_id="stranger")
    assert record(battle, "stranger").winner == "model_a"


def test_listeners_hear_of_a_vote_only_after_commit(voter, django_capture_on_commit_callbacks):
    heard = []

    def listener(sender, vote_id, battle_id, **kwargs):
        heard.append((sender, vote_id, battle_id))

    vote_recorded.connect(listener)
    try:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            vote = record(BattleFactory(), voter)
        assert heard == []
        for callback in callbacks:
            callback()
        assert heard == [(Vote, vote.id, vote.battle_id)]
    finally:
        vote_recorded.disconnect(listener)


def test_fast_and_bot_votes_are_kept_but_flagged(voter, settings):
    settings.ARENA_MIN_VOTE_SECONDS = 60
    vote = record(BattleFactory(), voter, user_agent="curl/8.0")
    assert vote.flagged
    assert set(vote.flags) == {"too_fast", "bot_user_agent"}


@pytest.mark.parametrize(("seconds_since_ready", "too_fast"), [(59, True), (60, False)])
def test_a_vote_is_too_fast_under_the_minimum_seconds_not_at_it(
    voter, settings, frozen_clock, seconds_since_ready, too_fast
):
    settings.ARENA_MIN_VOTE_SECONDS = 60
    battle = BattleFactory()
    ready_at = timezone.now() - timedelta(seconds=seconds_since_ready)
    Battle.objects.filter(pk=battle.pk).update(updated_at=ready_at)

    vote = record(battle, voter)

    assert (vote.flagged, vote.flags) == (too_fast, ["too_fast"] if too_fast else [])


@pytest.mark.postgres
def test_database_allows_one_vote_per_battle(voter):
    battle = BattleFactory()
    record(battle, voter)
    with pytest.raises(IntegrityError), transaction.atomic():
        Vote.objects.create(battle=battle, winner="tie", voter_id=voter)


@pytest.mark.postgres
def test_database_refuses_a_winner_outside_the_vocabulary(voter):
    battle = BattleFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Vote.objects.create(battle=battle, winner="model_c", voter_id=voter)


@pytest.mark.postgres
def test_database_refuses_a_battle_of_a_model_against_itself():
    model = ArenaModelFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Battle.objects.create(source="pool", model_a=model, model_b=model, state="ready")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_votes_on_one_battle_record_exactly_one():
    terms_accept(voter_id="voter-1")
    battle = BattleFactory()
    barrier = threading.Barrier(6)
    outcomes = []

    def vote(winner):
        try:
            barrier.wait()
            record(battle, "voter-1", winner=winner)
            outcomes.append("ok")
        except ArenaError as exc:
            outcomes.append(exc.status)
        finally:
            connection.close()

    threads = [threading.Thread(target=vote, args=(w,)) for w in ["model_a", "model_b"] * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes, key=str) == [409] * 5 + ["ok"]
    assert Vote.objects.filter(battle=battle).count() == 1


def test_the_vote_keeps_the_pages_language_apart_from_the_prompts(voter):
    battle = BattleFactory(prompt__language="en")
    vote = record(battle, voter, interface_language="fr")
    vote.refresh_from_db()
    assert (vote.interface_language, vote.battle.prompt.language) == ("fr", "en")
    assert record(BattleFactory(), voter).interface_language == ""
