"""Mixed battles: a pool prompt answered live by a preliminary live model against an established
model's stored answer, served by the pool draw and streamed over the battle websocket (driven
by Channels' WebsocketCommunicator against the loopback fake upstream, real database)."""

import random
from datetime import UTC, datetime

import pytest
from channels.db import database_sync_to_async
from django.core.exceptions import ImproperlyConfigured

from arena.models import Battle, BattleMessage
from arena.payloads import BattlePayload
from arena.sampling.store import sampling_stats_store
from arena.selectors import battle_payload, votes_for_rating
from arena.services.battles import battle_start_pool
from arena.services.votes import vote_record
from arena.tests.factories import pool_of
from arena.tests.fake_openai import FakeModel
from arena.tests.test_consumer_live import frames_until, open_socket, texts
from arena.tests.test_settings import import_production_settings

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("upstream_clients")]


def _one_live_model(live_models):
    """Only the first live model stays active: a new live model beside the pool's models."""
    live_models[1].is_active = False
    live_models[1].save()
    return live_models[0]


def _mark_established(models) -> None:
    """The latest snapshot's statistics, with these models established."""
    sampling_stats_store(
        snapshot_id=1,
        computed_at=datetime(2026, 1, 1, tzinfo=UTC),
        se={m.slug: 10.0 for m in models},
        counts=[],
        established=[m.slug for m in models],
    )


def _mixed(session_key: str = "s1", seed: int = 1) -> Battle:
    battle = battle_start_pool(session_key=session_key, rng=random.Random(seed)).battle
    assert battle.source == Battle.Source.MIXED
    return battle


def test_a_preliminary_live_model_gets_a_mixed_battle_with_the_stored_side_shown(
    settings, live_models
):
    settings.ARENA_BRIDGE_SHARE = 1.0
    live = _one_live_model(live_models)
    pool_models, prompts = pool_of(n_models=2, n_prompts=2, turns=2)
    started = battle_start_pool(session_key="s1", rng=random.Random(3))
    battle = started.battle
    assert battle.source == Battle.Source.MIXED and battle.state == Battle.State.STREAMING
    live_model = battle.model_a if battle.live_side == "a" else battle.model_b
    stored_model = battle.model_b if battle.live_side == "a" else battle.model_a
    assert live_model == live and stored_model in pool_models
    stored_side = "b" if battle.live_side == "a" else "a"
    messages = sorted(battle.messages.values_list("turn", "side", "status", "content"))
    completion = battle.prompt.completions.get(model=stored_model)
    assert messages == [
        (0, stored_side, "done", completion.turns[0]),
        (1, stored_side, "done", completion.turns[1]),
    ]
    payload = battle_payload(battle=battle, new_messages=started.messages)
    assert payload["source"] == "mixed" and payload["state"] == "streaming"
    assert payload["votable"] is False and payload["models"] is None
    assert all(battle.live_side not in turn for turn in payload["turns"])


def test_a_mixed_battle_takes_no_vote_before_its_live_side_has_answered(
    settings, live_models, visitor
):
    settings.ARENA_BRIDGE_SHARE = 1.0
    _one_live_model(live_models)
    pool_of(n_models=2, n_prompts=1)
    created = visitor.post("/api/battles", data="{}", content_type="application/json")
    assert created.status_code == 201 and created.json()["source"] == "mixed"
    voted = visitor.post(
        f"/api/battles/{created.json()['id']}/vote",
        data='{"winner": "model_a"}',
        content_type="application/json",
    )
    assert voted.status_code == 409
    assert voted.json()["error"]["code"] == "not_votable"
    assert "streaming" in voted.json()["error"]["message"]
    assert (
        not Battle.objects.get(pk=created.json()["id"])
        .messages.filter(status=BattleMessage.Status.STREAMING)
        .exists()
    )


def test_the_bridge_share_zero_serves_only_pool_battles(settings, live_models):
    settings.ARENA_BRIDGE_SHARE = 0.0
    _one_live_model(live_models)
    pool_of(n_models=2, n_prompts=2)
    sources = {
        battle_start_pool(session_key="s", rng=random.Random(i)).battle.source for i in range(20)
    }
    assert sources == {Battle.Source.POOL}


def test_the_bridge_share_is_the_share_of_mixed_battles_served(settings, live_models):
    settings.ARENA_BRIDGE_SHARE = 0.3
    _one_live_model(live_models)
    pool_of(n_models=2, n_prompts=2)
    rng = random.Random(11)
    sources = [battle_start_pool(session_key="s", rng=rng).battle.source for _ in range(300)]
    assert 0.2 < sources.count(Battle.Source.MIXED) / 300 < 0.4


def test_an_established_live_model_is_not_bridged(settings, live_models):
    settings.ARENA_BRIDGE_SHARE = 1.0
    live = _one_live_model(live_models)
    pool_models, _ = pool_of(n_models=2, n_prompts=2)
    _mark_established([live, *pool_models])
    sources = {
        battle_start_pool(session_key="s", rng=random.Random(i)).battle.source for i in range(20)
    }
    assert sources == {Battle.Source.POOL}


def test_a_preliminary_live_model_faces_an_established_pool_model(settings, live_models):
    settings.ARENA_BRIDGE_SHARE = 1.0
    live = _one_live_model(live_models)
    pool_models, _ = pool_of(n_models=3, n_prompts=2)
    _mark_established(pool_models[:1])  # the live model and two pool models preliminary
    for seed in range(15):
        battle = _mixed(seed=seed)
        assert {battle.model_a_id, battle.model_b_id} == {live.pk, pool_models[0].pk}


def test_a_live_model_whose_breaker_is_open_is_not_bridged(settings, live_models):
    settings.ARENA_BRIDGE_SHARE = 1.0
    live = _one_live_model(live_models)
    pool_of(n_models=2, n_prompts=1)
    provider = live.provider
    provider.breaker_open_until = datetime(2999, 1, 1, tzinfo=UTC)
    provider.save()
    assert (
        battle_start_pool(session_key="s", rng=random.Random(2)).battle.source == Battle.Source.POOL
    )


@pytest.mark.parametrize("value", ["-0.1", "1.5"])
def test_an_out_of_range_bridge_share_refuses_to_start_naming_the_setting(value):
    result = import_production_settings("import config.settings.test", ARENA_BRIDGE_SHARE=value)
    assert result.returncode != 0
    assert ImproperlyConfigured.__name__ in result.stderr
    assert "ARENA_BRIDGE_SHARE must be from 0 to 1" in result.stderr


def _serve_live(fake_upstream, live, tokens) -> None:
    fake_upstream.models[live.upstream_model_id] = FakeModel(tokens=tokens)


async def _start_mixed(settings, live_models, turns: int = 2):
    settings.ARENA_BRIDGE_SHARE = 1.0

    def make():
        live = _one_live_model(live_models)
        pool_of(n_models=2, n_prompts=1, turns=turns)
        return live

    live = await database_sync_to_async(make)()
    comm = await open_socket()
    battle = await database_sync_to_async(
        lambda: battle_start_pool(session_key=comm.session_key, rng=random.Random(5)).battle
    )()
    assert battle.source == Battle.Source.MIXED
    return live, comm, battle


async def test_the_live_side_answers_each_pool_turn_with_its_own_answers_in_context(
    settings, fake_upstream, live_models
):
    live, comm, battle = await _start_mixed(settings, live_models, turns=2)
    _serve_live(fake_upstream, live, ["Live ", "first"])
    await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    frames = await frames_until(comm, "turn_end")
    assert frames[0]["type"] == "turn_start" and frames[0]["turn"] == 0
    assert texts(frames)[battle.live_side] == "Live first"
    assert {f["side"] for f in frames if f["type"] == "side_end"} == {battle.live_side}
    first_end: BattlePayload = frames[-1]["battle"]
    assert first_end["state"] == "streaming" and first_end["votable"] is False
    prompt = await database_sync_to_async(lambda: battle.prompt.turns)()
    assert fake_upstream.requests_for(live.upstream_model_id)[-1].messages == [
        {"role": "user", "content": prompt[0]}
    ]
    _serve_live(fake_upstream, live, ["Live ", "second"])
    await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    frames = await frames_until(comm, "turn_end")
    assert frames[0]["turn"] == 1
    end: BattlePayload = frames[-1]["battle"]
    assert end["state"] == "ready" and end["votable"] is True and end["models"] is None
    assert [t[battle.live_side]["content"] for t in end["turns"]] == ["Live first", "Live second"]
    assert fake_upstream.requests_for(live.upstream_model_id)[-1].messages == [
        {"role": "user", "content": prompt[0]},
        {"role": "assistant", "content": "Live first"},
        {"role": "user", "content": prompt[1]},
    ]
    await comm.disconnect()

    def vote_and_read():
        vote = vote_record(
            battle_id=battle.pk,
            session_key=comm.session_key,
            voter_id="voter-1",
            winner="model_a",
        ).vote
        return vote, list(votes_for_rating().values_list("pk", flat=True))

    vote, rated = await database_sync_to_async(vote_and_read)()
    assert vote.pk in rated  # a mixed battle's vote counts for the leaderboard


async def test_a_mixed_battle_cannot_be_streamed_again_once_answered(
    settings, fake_upstream, live_models
):
    live, comm, battle = await _start_mixed(settings, live_models, turns=1)
    _serve_live(fake_upstream, live, ["Done"])
    await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    assert (await frames_until(comm, "turn_end"))[-1]["battle"]["state"] == "ready"
    await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    error = (await frames_until(comm, "error"))[-1]
    assert error["code"] == "not_continuable"
    assert len(fake_upstream.requests_for(live.upstream_model_id)) == 1
    await comm.disconnect()


async def test_another_sessions_mixed_battle_cannot_be_streamed(
    settings, fake_upstream, live_models
):
    live, comm, battle = await _start_mixed(settings, live_models, turns=1)
    other = await open_socket()
    await other.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    error = (await frames_until(other, "error"))[-1]
    assert error["code"] == "not_found"
    assert fake_upstream.requests_for(live.upstream_model_id) == []
    await other.send_json_to({"type": "stream", "battle_id": "not-a-uuid"})
    assert (await frames_until(other, "error"))[-1]["code"] == "not_found"
    await other.disconnect()
    await comm.disconnect()


async def test_a_failed_live_answer_makes_the_battle_unvotable_and_can_be_streamed_again(
    settings, fake_upstream, live_models
):
    live, comm, battle = await _start_mixed(settings, live_models, turns=1)
    fake_upstream.models[live.upstream_model_id] = FakeModel(fault="http_500")
    await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    end = (await frames_until(comm, "turn_end"))[-1]["battle"]
    assert end["state"] == "errored" and end["votable"] is False
    _serve_live(fake_upstream, live, ["Second ", "try"])
    await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    frames = await frames_until(comm, "turn_end")
    assert frames[0]["regenerated"] is True
    assert frames[-1]["battle"]["state"] == "ready"

    def live_messages():
        return list(
            BattleMessage.objects.filter(battle=battle, side=battle.live_side)
            .order_by("created_at")
            .values_list("status", "superseded_at")
        )

    (failed, failed_at), (done, current) = await database_sync_to_async(live_messages)()
    assert failed == "error" and failed_at is not None  # kept on record, superseded
    assert done == "done" and current is None
    await comm.disconnect()


async def test_leaving_mid_stream_saves_the_live_answer_aborted(
    settings, fake_upstream, live_models
):
    live, comm, battle = await _start_mixed(settings, live_models, turns=1)
    fake_upstream.models[live.upstream_model_id] = FakeModel(tokens=200, delay=0.05)
    await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
    await frames_until(comm, "deltas")
    await comm.disconnect()
    fake_upstream.wait_closed(live.upstream_model_id)

    def read():
        saved = Battle.objects.get(pk=battle.pk)
        message = BattleMessage.objects.get(
            battle=battle, side=battle.live_side, superseded_at__isnull=True
        )
        return saved.state, message.status

    assert await database_sync_to_async(read)() == ("aborted", "aborted")
