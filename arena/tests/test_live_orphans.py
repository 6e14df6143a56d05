"""A live battle whose streaming worker died is settled by the visitor's next request for it (a
vote, a regenerate, a follow-up, the page's reconnect), not left streaming until the sweep; a
battle whose owner is alive is left to it."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.contrib.sessions.backends.db import SessionStore
from django.core.cache import caches
from django.utils import timezone

from arena.errors import ArenaError
from arena.live.owners import owners_alive
from arena.live.turns import (
    battle_regenerate,
    battle_start_live,
    battle_turn_add,
    messages_progress,
)
from arena.models import Battle, BattleMessage
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.test_consumer_live import open_socket
from arena.tests.test_live_services import live

pytestmark = pytest.mark.redis


def streaming_battle(session_key: str, *, owner_alive: bool):
    """A battle streaming since a while ago, with half an answer saved; its owner's liveness
    mark kept (a live worker) or gone (a killed one)."""
    models = live(2)
    plan = battle_start_live(
        session_key=session_key, prompt="Hi", mode="named", model_slugs=[m.slug for m in models]
    )
    messages_progress(contents={plan.sides["a"].message_id: "half an ans"})
    Battle.objects.filter(pk=plan.battle_id).update(
        updated_at=timezone.now() - timedelta(seconds=60)
    )
    assert owners_alive([plan.battle_id]) == {plan.battle_id}
    if not owner_alive:
        caches["default"].delete(f"arena:live-owner:{plan.battle_id}")
    return plan


def assert_settled_keeping_the_text(plan) -> None:
    assert Battle.objects.get(pk=plan.battle_id).state != Battle.State.STREAMING
    a = BattleMessage.objects.get(pk=plan.sides["a"].message_id)
    assert a.status == BattleMessage.Status.ABORTED and a.content == "half an ans"


@pytest.mark.django_db
def test_a_vote_settles_a_battle_whose_owner_is_gone_and_says_it_is_not_votable():
    terms_accept(voter_id="v1")
    plan = streaming_battle("s1", owner_alive=False)
    with pytest.raises(ArenaError) as refused:
        vote_record(battle_id=plan.battle_id, session_key="s1", voter_id="v1", winner="tie")
    assert refused.value.code == "not_votable" and "aborted" in refused.value.message
    assert_settled_keeping_the_text(plan)


@pytest.mark.django_db
def test_regenerate_settles_a_battle_whose_owner_is_gone_and_goes_on():
    plan = streaming_battle("s1", owner_alive=False)
    again = battle_regenerate(battle_id=plan.battle_id, session_key="s1")
    assert again.regenerated and again.turn == 0
    a = BattleMessage.objects.get(pk=plan.sides["a"].message_id)
    assert a.status == BattleMessage.Status.ABORTED and a.content == "half an ans"
    assert a.superseded_at is not None  # kept on record, replaced by the new answers


@pytest.mark.django_db
def test_a_follow_up_settles_a_battle_whose_owner_is_gone_and_says_what_to_do():
    plan = streaming_battle("s1", owner_alive=False)
    with pytest.raises(ArenaError) as refused:
        battle_turn_add(battle_id=plan.battle_id, session_key="s1", prompt="And?")
    assert refused.value.code == "not_continuable"
    assert_settled_keeping_the_text(plan)
    assert Battle.objects.get(pk=plan.battle_id).state == Battle.State.ABORTED


@pytest.mark.django_db
def test_a_battle_whose_owner_is_alive_is_left_streaming():
    terms_accept(voter_id="v1")
    plan = streaming_battle("s1", owner_alive=True)
    for call in (
        lambda: battle_regenerate(battle_id=plan.battle_id, session_key="s1"),
        lambda: battle_turn_add(battle_id=plan.battle_id, session_key="s1", prompt="And?"),
    ):
        with pytest.raises(ArenaError) as refused:
            call()
        assert refused.value.code == "still_streaming"
    with pytest.raises(ArenaError) as refused:
        vote_record(battle_id=plan.battle_id, session_key="s1", voter_id="v1", winner="tie")
    assert refused.value.code == "not_votable"
    assert Battle.objects.get(pk=plan.battle_id).state == Battle.State.STREAMING


def _session() -> str:
    store = SessionStore()
    store["arena_voter_id"] = "voter-1"
    store.create()
    return store.session_key


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("upstream_clients")
async def test_the_pages_reconnect_settles_its_battles_whose_owner_is_gone_only():
    session_key = await database_sync_to_async(_session)()
    gone = await database_sync_to_async(streaming_battle)(session_key, owner_alive=False)
    alive = await database_sync_to_async(streaming_battle)(session_key, owner_alive=True)
    comm = await open_socket(session_key)
    await comm.send_json_to({"type": "launch"})  # connect has run to its end
    assert (await comm.receive_json_from(10))["code"] == "invalid"
    await database_sync_to_async(assert_settled_keeping_the_text)(gone)
    state = await database_sync_to_async(lambda: Battle.objects.get(pk=alive.battle_id).state)()
    assert state == Battle.State.STREAMING
    await comm.disconnect()
