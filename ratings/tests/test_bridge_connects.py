"""A new live model joins the pool models' board through mixed battles: served by the pool
draw while it is preliminary, its live side streamed over the battle websocket from the loopback
fake upstream (the real openai client), voted on through the ordinary vote path, rated by the
ordinary refit (real database)."""

import random

import pytest
from channels.db import database_sync_to_async

from arena.models import Battle, Completion
from arena.sampling.stats import established_models
from arena.services.battles import battle_start_pool
from arena.services.votes import vote_record
from arena.tests.factories import CompletionFactory, PromptFactory
from arena.tests.fake_openai import FakeModel
from arena.tests.test_consumer_live import frames_until, open_socket
from ratings import services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("upstream_clients")]

#: Mixed-battle votes after which the new live model is rated on the pool models' board.
VOTES_TO_CONNECT = 2


@pytest.fixture
async def upstream_clients():
    """Closes the upstream HTTP clients this test's event loop opened (and their sockets)."""
    from arena.live.upstream import close_clients

    yield
    await close_clients()


@pytest.fixture(autouse=True)
def small_board(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    # The pool models have about 40 votes each: established at this board's scale.
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10


def _status(snapshot, slug: str, style: str) -> str:
    """How the overall view lists the model: rated, preliminary, a provisional reason, absent."""
    overall = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")
    result = overall["results"][style]
    for entry in result["models"]:
        if entry["model"] == slug:
            return "preliminary" if entry["preliminary"] else "rated"
    for entry in result["provisional"]:
        if entry["model"] == slug:
            return entry["reason"]
    return "absent"


async def test_a_new_live_model_is_rated_with_the_pool_models_after_a_few_mixed_votes(
    settings, rated_models, live_models, fake_upstream
):
    def pool_and_snapshot():
        # The rated models answered the pool; the new live model has no votes at all.
        for n in range(3):
            prompt = PromptFactory(turns=[f"Pool question {n}?"])
            for model in rated_models:
                CompletionFactory(prompt=prompt, model=model, turns=[f"A stored answer to {n}."])
        live_models[1].is_active = False
        live_models[1].save()
        services.snapshot_refresh()  # publishes the sampling statistics after its commit
        return live_models[0]

    live = await database_sync_to_async(pool_and_snapshot)()
    assert not await database_sync_to_async(Completion.objects.filter(model=live).exists)()
    established = await database_sync_to_async(established_models)()
    assert established == {m.pk for m in rated_models}  # the live model is not established
    fake_upstream.models[live.upstream_model_id] = FakeModel(tokens=["A live ", "answer."])
    comm = await open_socket()
    rng = random.Random(4)
    served = {Battle.Source.POOL: 0, Battle.Source.MIXED: 0}
    statuses: list[tuple[str, str]] = []
    # The live side wins the first mixed battle and loses the second, and so on.
    while served[Battle.Source.MIXED] < VOTES_TO_CONNECT:
        battle = await database_sync_to_async(
            lambda: battle_start_pool(session_key=comm.session_key, rng=rng).battle
        )()
        served[battle.source] += 1
        if battle.source != Battle.Source.MIXED:
            continue  # a pool battle the visitor skips
        assert live.pk in (battle.model_a_id, battle.model_b_id)
        await comm.send_json_to({"type": "stream", "battle_id": str(battle.pk)})
        end = (await frames_until(comm, "turn_end"))[-1]["battle"]
        assert end["votable"] is True
        stored_side = "b" if battle.live_side == "a" else "a"
        live_wins = served[Battle.Source.MIXED] % 2 == 1
        winner = f"model_{battle.live_side if live_wins else stored_side}"

        def vote_and_rate(battle=battle, winner=winner):
            vote_record(
                battle_id=battle.pk, session_key=comm.session_key, voter_id="voter-1", winner=winner
            )
            snapshot = services.snapshot_refresh().snapshot
            return _status(snapshot, live.slug, "off"), _status(snapshot, live.slug, "on")

        statuses.append(await database_sync_to_async(vote_and_rate)())
    await comm.disconnect()

    # One win alone cannot be placed (no upper bound); a win and a loss against the pool's
    # models put it on their scale, preliminary until it has RATINGS_ESTABLISHED_MIN_VOTES.
    assert statuses == [("no_losses", "no_losses"), ("preliminary", "preliminary")]
    assert "not_connected" not in {s for pair in statuses for s in pair}


async def test_live_models_that_met_only_each_other_are_not_connected_until_bridged(
    settings, rated_models, live_models, make_vote
):
    def votes_and_snapshot():
        x, y = live_models
        make_vote(x, y, "model_a")
        make_vote(y, x, "model_a")
        snapshot = services.snapshot_refresh().snapshot
        return _status(snapshot, x.slug, "off"), established_models()

    status, established = await database_sync_to_async(votes_and_snapshot)()
    assert status == "not_connected"
    assert not {m.pk for m in live_models} & established
