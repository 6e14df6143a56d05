"""First-turn-only exports (``first_turn_only`` of arena.exports): every format written from a
battle's first turn alone."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from arena.exports import ExportStats, export_rows, voted_battles
from arena.models import BattleMessage, Vote
from arena.tests.factories import ArenaModelFactory

pytestmark = pytest.mark.django_db

URL = "/api/exports/votes"
FIRST = {"role": "user", "content": "Question 1?"}


@pytest.fixture
def pair(db):
    return ArenaModelFactory(slug="owl-7b"), ArenaModelFactory(slug="lark-70b")


@pytest.fixture
def two_turns(make_vote, pair):
    """A two-turn battle won by side b, whose answers differ from turn to turn."""

    def make(winner: str = "model_b") -> Vote:
        vote = make_vote(*pair, winner, turns=2, answers=("a first", "b first"))
        for side in ("a", "b"):
            BattleMessage.objects.filter(battle=vote.battle, side=side, turn=1).update(
                content=f"{side} second"
            )
        return vote

    return make


def first_turn_rows(fmt: str) -> tuple[list[dict], ExportStats]:
    stats = ExportStats()
    return list(export_rows(voted_battles(), fmt, stats, first_turn_only=True)), stats


def test_trl_rows_of_the_first_turn_hold_the_first_answers_and_no_follow_up(two_turns):
    two_turns()
    (row,), _ = first_turn_rows("trl")
    assert row == {
        "prompt": [FIRST],
        "chosen": [{"role": "assistant", "content": "b first"}],
        "rejected": [{"role": "assistant", "content": "a first"}],
    }


def test_kto_rows_of_the_first_turn_label_the_first_answers(two_turns):
    two_turns()
    written, stats = first_turn_rows("kto")
    assert written == [
        {
            "prompt": [FIRST],
            "completion": [{"role": "assistant", "content": "b first"}],
            "label": True,
        },
        {
            "prompt": [FIRST],
            "completion": [{"role": "assistant", "content": "a first"}],
            "label": False,
        },
    ]
    assert (stats.written, stats.votes) == (2, 1)


def test_openai_rows_of_the_first_turn_take_multi_turn_battles_too(two_turns):
    two_turns()
    written, stats = first_turn_rows("openai")
    assert written == [
        {
            "input": {"messages": [FIRST]},
            "preferred_output": [{"role": "assistant", "content": "b first"}],
            "non_preferred_output": [{"role": "assistant", "content": "a first"}],
        }
    ]
    assert not stats.skipped


def test_hh_rlhf_rows_of_the_first_turn_are_one_exchange(two_turns):
    two_turns()
    (row,), _ = first_turn_rows("hh-rlhf")
    assert row == {
        "chosen": "\n\nHuman: Question 1?\n\nAssistant: b first",
        "rejected": "\n\nHuman: Question 1?\n\nAssistant: a first",
    }


def test_arena_rows_of_the_first_turn_are_one_turn_without_the_whole_battles_style(two_turns):
    two_turns("tie (bothbad)")
    (row,), _ = first_turn_rows("arena")
    assert row["turn"] == 1 and row["winner"] == "tie (bothbad)"
    assert row["conversation_a"] == [FIRST, {"role": "assistant", "content": "a first"}]
    assert row["conversation_b"] == [FIRST, {"role": "assistant", "content": "b first"}]
    # The vote's style counts cover both turns: a first-turn row does not claim them.
    assert row["conv_metadata"] is None


def test_a_one_turn_battle_is_written_the_same_with_or_without_the_option(make_vote, pair):
    make_vote(*pair, "model_a", answers=("good", "bad"))
    for fmt in ("arena", "trl", "kto", "openai", "hh-rlhf"):
        whole = list(export_rows(voted_battles(), fmt, ExportStats()))
        assert first_turn_rows(fmt)[0] == whole


def test_without_the_option_the_follow_up_stays_inside_chosen_and_rejected(two_turns):
    two_turns()
    (row,) = list(export_rows(voted_battles(), "trl", ExportStats()))
    assert [m["content"] for m in row["chosen"]] == ["b first", "Follow-up 1", "b second"]


def test_the_command_writes_first_turn_rows_with_first_turn_only(two_turns, tmp_path):
    two_turns()
    out, err = StringIO(), StringIO()
    call_command("export_votes", "--format=trl", "--first-turn-only", stdout=out, stderr=err)
    (row,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert row["chosen"] == [{"role": "assistant", "content": "b first"}]
    assert err.getvalue().strip() == "trl: 1 written"
    folder = tmp_path / "first"
    call_command(
        "export_votes",
        "--format=openai",
        "--first-turn-only",
        f"--output={folder}/",
        stderr=StringIO(),
    )
    card = (folder / "README.md").read_text()
    assert "- turns: the first only" in card
    assert "- rows: 1, from 1 votes" in card


def test_the_http_export_takes_first_turn_only_and_names_a_bad_value(admin_client, two_turns):
    two_turns()
    response = admin_client.get(URL, {"format": "hh-rlhf", "first_turn_only": "1"})
    assert response.status_code == 200
    lines = b"".join(response).decode().splitlines()
    assert [json.loads(line)["chosen"] for line in lines] == [
        "\n\nHuman: Question 1?\n\nAssistant: b first"
    ]
    whole = admin_client.get(URL, {"format": "hh-rlhf"})
    assert b"Follow-up 1" in b"".join(whole)
    bad = admin_client.get(URL, {"format": "trl", "first_turn_only": "maybe"})
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "first_turn_only"
