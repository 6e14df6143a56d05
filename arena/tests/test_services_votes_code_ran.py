"""A vote cast after running code of both answers in the browser is marked ``code_ran``."""

import pytest

from arena.errors import ArenaError
from arena.models import Battle, Vote
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import BattleFactory

pytestmark = pytest.mark.django_db

CODE_A = "Here:\n\n```python\nprint(1)\n```"
CODE_B = "Or:\n\n~~~html\n<p>hi</p>\n~~~"


@pytest.fixture
def voter():
    terms_accept(voter_id="voter-1")
    return "voter-1"


def record(battle, voter, ran):
    return vote_record(
        battle_id=battle.id, session_key="session-1", voter_id=voter, winner="tie", ran=ran
    ).vote


def test_a_vote_after_running_both_sides_code_is_marked_code_ran(voter):
    battle = BattleFactory(messages={"a": CODE_A, "b": CODE_B})
    assert record(battle, voter, {"a": True, "b": True}).code_ran is True


@pytest.mark.parametrize("ran", [None, {}, {"a": True}, {"a": True, "b": False}])
def test_a_vote_without_code_run_on_both_sides_is_not_marked(voter, ran):
    battle = BattleFactory(messages={"a": CODE_A, "b": CODE_B})
    assert record(battle, voter, ran).code_ran is False


def test_a_side_without_a_code_block_leaves_the_vote_unmarked(voter):
    battle = BattleFactory(messages={"a": CODE_A, "b": "No code here, only `inline`."})
    assert record(battle, voter, {"a": True, "b": True}).code_ran is False


@pytest.mark.parametrize("ran", [True, "ab", ["a", "b"], {"a": 1}, {"c": True}, {"a": "true"}])
def test_a_malformed_ran_is_a_400_naming_the_field_and_records_nothing(voter, ran):
    battle = BattleFactory(messages={"a": CODE_A, "b": CODE_B})
    with pytest.raises(ArenaError) as exc:
        record(battle, voter, ran)
    assert (exc.value.status, exc.value.field) == (400, "ran")
    battle.refresh_from_db()
    assert battle.state == Battle.State.READY and not Vote.objects.exists()
