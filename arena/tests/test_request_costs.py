"""What a pool battle and its vote cost the database, and the per-process copies that keep it low
(``arena.pool_cache``).

The statement counts are pinned: a change that adds a read to the hot path fails here. Inside a
test's transaction an ``atomic`` block is a savepoint and its release, counted as two statements.
"""

import json
import random

import pytest

from arena import pool_cache
from arena.cache import counters_take
from arena.models import ArenaModel, Battle, Completion, Vote
from arena.services.battles import battle_start_pool
from arena.services.models import model_retire
from arena.tests.factories import ArenaModelFactory, CompletionFactory, pool_of
from arena.tests.redis_server import own_redis  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def cached_sessions(settings):
    """Production's sessions: read from the cache, the database only on a miss."""
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def start(client) -> str:
    response = post_json(client, "/api/battles", {})
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def drawn_models(n: int = 40) -> set[int]:
    models: set[int] = set()
    rng = random.Random(3)
    for i in range(n):
        battle = battle_start_pool(session_key=f"s{i}", rng=rng).battle
        models |= {battle.model_a_id, battle.model_b_id}
    return models


def test_a_pool_battle_start_is_the_battle_and_its_messages_written_nothing_read(
    cached_sessions, visitor, django_assert_max_num_queries
):
    pool_of(n_models=2, n_prompts=1, turns=2)
    start(visitor)  # the first reads the pool into this process's copies
    with django_assert_max_num_queries(4):  # savepoint, battle, messages, release
        response = post_json(visitor, "/api/battles", {})
    assert response.status_code == 201
    payload = response.json()
    assert [turn["prompt"] for turn in payload["turns"]] == ["Prompt 0 turn 1", "Prompt 0 turn 2"]
    assert payload["votable"] and payload["vote"] is None and payload["models"] is None


def test_a_vote_is_one_locked_read_its_messages_and_two_writes(
    cached_sessions, visitor, django_assert_max_num_queries
):
    pool_of(n_models=2, n_prompts=1)
    battle_id = start(visitor)
    # savepoint, the locked battle (models, vote row, terms), its messages, insert, update,
    # release: the answer is built from what those read.
    with django_assert_max_num_queries(6):
        response = post_json(visitor, f"/api/battles/{battle_id}/vote", {"winner": "model_b"})
    assert response.status_code == 201, response.content
    payload = response.json()
    battle = Battle.objects.select_related("model_a", "model_b").get(pk=battle_id)
    assert payload["vote"] == {"winner": "model_b"} and not payload["votable"]
    assert payload["state"] == "voted"
    assert payload["models"]["a"]["slug"] == battle.model_a.slug
    assert payload["models"]["b"]["slug"] == battle.model_b.slug
    assert payload == visitor.get(f"/api/battles/{battle_id}").json()
    assert Vote.objects.get(battle_id=battle_id).winner == "model_b"


def test_the_vote_answer_without_terms_is_still_the_terms_error(db):
    from django.test import Client

    pool_of(n_models=2, n_prompts=1)
    client = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Test")
    battle_id = start(client)
    response = post_json(client, f"/api/battles/{battle_id}/vote", {"winner": "tie"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "terms_required"
    assert not Vote.objects.exists()


def test_a_model_deactivated_in_this_process_is_not_drawn_next(db):
    models, _ = pool_of(n_models=3, n_prompts=2)
    assert drawn_models() == {m.pk for m in models}
    models[0].is_active = False
    models[0].save()
    assert drawn_models() == {models[1].pk, models[2].pk}


def test_a_model_retired_by_the_admin_action_is_not_drawn_next(db):
    """The admin's action retires through the service, whose save tells the copies."""
    models, _ = pool_of(n_models=4, n_prompts=2)
    assert drawn_models() == {m.pk for m in models}
    assert model_retire(model=models[0], reason="Endpoint shut down") is not None
    assert drawn_models() == {models[1].pk, models[2].pk, models[3].pk}


def test_a_model_added_with_pool_answers_is_drawn_next(db):
    models, prompts = pool_of(n_models=2, n_prompts=1)
    assert drawn_models() == {m.pk for m in models}
    newcomer = ArenaModelFactory()
    CompletionFactory(prompt=prompts[0], model=newcomer)
    assert newcomer.pk in drawn_models()


def test_another_process_change_is_seen_through_the_shared_generation(db):
    """A write without a signal here (another process's, or a queryset update) is seen once the
    shared generation changes (what that process's receivers do)."""
    models, _ = pool_of(n_models=3, n_prompts=2)
    assert drawn_models() == {m.pk for m in models}
    ArenaModel.objects.filter(pk=models[0].pk).update(is_active=False)  # no signal
    assert models[0].pk in drawn_models(), "this process still holds its copy"
    pool_cache.generation_bump("pool")
    assert drawn_models() == {models[1].pk, models[2].pk}


def test_a_write_without_any_signal_is_seen_once_the_copy_is_too_old(db, monkeypatch):
    models, _ = pool_of(n_models=3, n_prompts=2)
    now = [1000.0]
    monkeypatch.setattr(pool_cache.time, "monotonic", lambda: now[0])
    assert drawn_models() == {m.pk for m in models}
    ArenaModel.objects.filter(pk=models[0].pk).update(is_active=False)
    now[0] += pool_cache.MAX_AGE_SECONDS - 1
    assert models[0].pk in drawn_models()
    now[0] += 1
    assert drawn_models() == {models[1].pk, models[2].pk}


def test_an_answer_edited_and_saved_is_served_as_edited(db):
    models, prompts = pool_of(n_models=2, n_prompts=1)
    battle_start_pool(session_key="s", rng=random.Random(1))
    completion = Completion.objects.get(model=models[0])
    completion.turns = ["Edited answer, as gpt-9000 would say."]
    completion.save()
    battle = battle_start_pool(session_key="s", rng=random.Random(1)).battle
    side = "a" if battle.model_a_id == models[0].pk else "b"
    assert battle.messages.get(side=side).content == "Edited answer, as gpt-9000 would say."


def test_counters_in_the_local_cache_start_at_one_and_count():
    assert counters_take(["c:one", "c:two"], timeout=60) == [1, 1]
    assert counters_take(["c:one"], timeout=60) == [2]
    assert counters_take(["c:two", "c:one"], timeout=60) == [2, 3]


@pytest.mark.redis
def test_counters_in_redis_are_one_round_trip_with_the_timeout_set(
    own_redis,  # noqa: F811
    settings,
):
    from django.core.cache import cache

    settings.CACHES = {
        "default": {"BACKEND": "arena.cache.FallbackRedisCache", "LOCATION": own_redis.url}
    }
    assert counters_take(["c:one", "c:two"], timeout=60) == [1, 1]
    assert counters_take(["c:two", "c:one"], timeout=60) == [2, 2]
    assert cache.get("c:one") == 2  # an ordinary integer value, as incr leaves it
    client = cache._cache.get_client()
    assert 0 < client.ttl(cache.make_key("c:one")) <= 60
    # Django's client builds a redis-py client per command; this one keeps one per pool.
    assert client is cache._cache.get_client(write=True)


def test_a_pool_import_starts_one_pool_generation_and_its_models_are_drawn(db, monkeypatch):
    from arena.services.pool import PoolLine, pool_write

    bumps: list[str] = []
    real_bump = pool_cache.generation_bump
    monkeypatch.setattr(pool_cache, "generation_bump", lambda s: (bumps.append(s), real_bump(s)))
    lines = [
        PoolLine(i, (f"question {i // 2}",), f"model-{i % 2}", (f"answer {i}",), "", "en", "")
        for i in range(6)
    ]
    result = pool_write(lines=lines, source="bulk-test")
    assert result.completions_created == 6
    assert bumps == ["pool"]  # once for the whole import, not for every row
    assert {m.slug for m in ArenaModel.objects.filter(pk__in=drawn_models())} == {
        "model-0",
        "model-1",
    }


def test_a_visitors_prompt_saved_again_leaves_the_copies_and_a_pool_prompt_does_not(
    db, monkeypatch
):
    from arena.models import USER_PROMPT_SOURCE, Prompt

    _, prompts = pool_of(n_models=2, n_prompts=1)
    bumps: list[str] = []
    monkeypatch.setattr(pool_cache, "generation_bump", bumps.append)
    visitors = Prompt.objects.create(turns=["hello"], source=USER_PROMPT_SOURCE)
    visitors.turns = ["hello", "and a follow-up"]
    visitors.save(update_fields=["turns"])  # what each live turn added does
    assert bumps == []
    prompts[0].turns = ["an edited pool question"]
    prompts[0].save(update_fields=["turns"])
    assert bumps == ["pool"]
