import random
from collections import Counter

import pytest

from arena.errors import ArenaError
from arena.models import Battle, BattleMessage
from arena.services.battles import battle_start_pool
from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory, pool_of

pytestmark = pytest.mark.django_db


def test_pool_battle_pairs_two_different_models_that_answered_its_prompt():
    models, prompts = pool_of(n_models=3, n_prompts=4)
    battle = battle_start_pool(session_key="s1", rng=random.Random(1)).battle
    assert battle.model_a_id != battle.model_b_id
    assert battle.state == Battle.State.READY
    assert battle.source == Battle.Source.POOL
    answered = set(battle.prompt.completions.values_list("model_id", flat=True))
    assert {battle.model_a_id, battle.model_b_id} <= answered
    messages = {m.side: m for m in battle.messages.all()}
    assert messages["a"].content == battle.prompt.completions.get(model=battle.model_a).turns[0]
    assert messages["b"].content == battle.prompt.completions.get(model=battle.model_b).turns[0]


def test_pool_battle_shows_each_variant_of_a_model_answer_uniformly():
    models, prompts = pool_of(n_models=2, n_prompts=1, turns=1)
    for n in range(2):
        CompletionFactory(prompt=prompts[0], model=models[0], turns=[f"Variant {n} of A"])
    texts = set(prompts[0].completions.filter(model=models[0]).values_list("turns__0", flat=True))
    rng = random.Random(5)
    shown = Counter()
    for _ in range(300):
        battle = battle_start_pool(session_key="s", rng=rng).battle
        side = "a" if battle.model_a_id == models[0].id else "b"
        shown[battle.messages.get(side=side).content] += 1
    # Three variants, about 100 battles each (a binomial's spread is about 8).
    assert set(shown) == texts
    assert min(shown.values()) > 60


def test_pool_battle_shows_every_turn_of_a_multi_turn_prompt():
    pool_of(n_models=2, n_prompts=1, turns=2)
    battle = battle_start_pool(session_key="s1").battle
    turns = sorted(battle.messages.values_list("turn", "side"))
    assert turns == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    assert battle.messages.get(turn=1, side="a").user_content == battle.prompt.turns[1]


def test_inactive_and_zero_weight_models_are_never_drawn():
    models, _ = pool_of(n_models=4, n_prompts=3)
    models[0].is_active = False
    models[0].save()
    models[1].sampling_weight = 0
    models[1].save()
    rng = random.Random(7)
    seen = set()
    for _ in range(30):
        battle = battle_start_pool(session_key="s", rng=rng).battle
        seen |= {battle.model_a_id, battle.model_b_id}
    assert seen == {models[2].id, models[3].id}


def test_models_are_drawn_in_proportion_to_their_weight(settings):
    settings.ARENA_ACTIVE_SAMPLING = False  # the weights alone (test_sampling: the active rule)
    models, _ = pool_of(n_models=3, n_prompts=2)
    models[0].sampling_weight = 8
    models[0].save()
    rng = random.Random(3)
    counts = Counter()
    for _ in range(300):
        battle = battle_start_pool(session_key="s", rng=rng).battle
        counts.update([battle.model_a_id, battle.model_b_id])
    # The heavy model is in almost every battle; the two light ones share the other slot.
    assert counts[models[0].id] > 0.85 * 300
    assert counts[models[1].id] > 60 and counts[models[2].id] > 60


def test_sides_are_assigned_in_random_order():
    models, _ = pool_of(n_models=2, n_prompts=1)
    rng = random.Random(11)
    sides = Counter(
        battle_start_pool(session_key="s", rng=rng).battle.model_a_id for _ in range(60)
    )
    assert set(sides) == {models[0].id, models[1].id}


def test_fewer_than_two_pool_models_is_a_clear_503():
    CompletionFactory()
    with pytest.raises(ArenaError) as exc:
        battle_start_pool(session_key="s")
    assert exc.value.status == 503
    assert exc.value.code == "no_battle_available"
    assert Battle.objects.count() == 0


def test_models_without_a_shared_prompt_give_no_battle():
    CompletionFactory(model=ArenaModelFactory(), prompt=PromptFactory())
    CompletionFactory(model=ArenaModelFactory(), prompt=PromptFactory())
    with pytest.raises(ArenaError) as exc:
        battle_start_pool(session_key="s")
    assert exc.value.status == 503
    assert BattleMessage.objects.count() == 0
