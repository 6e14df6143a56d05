"""The typed contracts of arena/payloads.py say what the models and the API do."""

import json
from typing import get_args, get_type_hints

import pytest

from arena.errors import not_found
from arena.models import Battle, BattleMessage, Vote
from arena.payloads import (
    WINNERS,
    BattleMode,
    BattlePayload,
    BattleSource,
    BattleState,
    ErrorBody,
    MessageStatus,
    ModelPublic,
    Side,
    SideMessage,
    Turn,
    Winner,
    is_winner,
)
from arena.tests.factories import pool_of


@pytest.mark.parametrize(
    ("literal", "choices"),
    [
        (Winner, Vote.Winner),
        (Side, BattleMessage.Side),
        (MessageStatus, BattleMessage.Status),
        (BattleMode, Battle.Mode),
        (BattleSource, Battle.Source),
        (BattleState, Battle.State),
    ],
    ids=["winner", "side", "message-status", "mode", "source", "state"],
)
def test_each_literal_spells_its_model_choices(literal, choices):
    assert sorted(get_args(literal)) == sorted(choices.values)


def test_is_winner_accepts_the_four_verdicts_only():
    assert WINNERS == set(Vote.Winner.values)
    assert all(is_winner(w) for w in Vote.Winner.values)
    for other in ("Model_A", "model_a ", "bothbad", "", None, 1, ["tie"]):
        assert not is_winner(other)


def _keys(typed_dict: type) -> set[str]:
    return set(get_type_hints(typed_dict))


@pytest.mark.django_db
def test_the_api_battle_before_and_after_the_vote_has_the_typed_keys(visitor):
    pool_of(n_models=3, n_prompts=2, turns=2)
    created = visitor.post("/api/battles", data="{}", content_type="application/json")
    assert created.status_code == 201
    battle = created.json()
    voted = visitor.post(
        f"/api/battles/{battle['id']}/vote",
        data=json.dumps({"winner": "tie (bothbad)"}),
        content_type="application/json",
    ).json()
    for payload in (battle, voted):
        assert set(payload) == _keys(BattlePayload)
        for turn in payload["turns"]:
            assert set(turn) == _keys(Turn)  # pool battles have both sides in every turn
            assert set(turn["a"]) == set(turn["b"]) == _keys(SideMessage)
    assert battle["vote"] is None and battle["models"] is None
    assert voted["vote"] == {"winner": "tie (bothbad)"}
    assert set(voted["models"]) == {"a", "b"}
    assert set(voted["models"]["a"]) == set(voted["models"]["b"]) == _keys(ModelPublic)


def test_an_error_body_has_the_typed_shape():
    body: ErrorBody = not_found("Battle").as_dict()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
