"""Starting battles from the prompt pool."""

import random
from collections.abc import Sequence

from django.db import transaction

from answer_style import style_counts
from arena.env.serve import env_battle_serve
from arena.errors import ArenaError, ErrorCode
from arena.identity import session_hash
from arena.inputs import text_storable
from arena.leaks import answer_names_model
from arena.models import ArenaModel, Battle, BattleMessage, Completion, Prompt
from arena.sampling import draw_pair
from arena.sampling_stats import pair_probabilities_active, sampling_active

_PAIR_ATTEMPTS = 20


def _weighted_pick(
    candidates: Sequence[tuple[int, float]], rng: random.Random, exclude: int | None = None
) -> int | None:
    pool = [(pk, w) for pk, w in candidates if pk != exclude and w > 0]
    if not pool:
        return None
    return rng.choices([pk for pk, _ in pool], weights=[w for _, w in pool], k=1)[0]


def _pool_models() -> list[tuple[int, float]]:
    """Active models with at least one pool answer, with their sampling weights."""
    return list(
        ArenaModel.objects.filter(
            is_active=True,
            sampling_weight__gt=0,
            completions__source=Completion.Source.POOL,
        )
        .distinct()
        .values_list("id", "sampling_weight")
    )


def _shared_prompt(model_a: int, model_b: int, rng: random.Random) -> Prompt | None:
    """A random pool prompt both models answered."""
    answered_by_b = Completion.objects.filter(
        model_id=model_b, source=Completion.Source.POOL
    ).values("prompt_id")
    prompt_ids = list(
        Completion.objects.filter(
            model_id=model_a, source=Completion.Source.POOL, prompt_id__in=answered_by_b
        ).values_list("prompt_id", flat=True)
    )
    if not prompt_ids:
        return None
    return Prompt.objects.get(pk=rng.choice(prompt_ids))


def battle_start_pool(*, session_key: str, rng: random.Random | None = None) -> Battle:
    """Serve a pool battle: a prompt and the answers of two different active models.

    The two models are drawn by the active pair rule (``arena.sampling``, from the latest
    snapshot, mixed with the sampling weights and a floor) or, with ``ARENA_ACTIVE_SAMPLING``
    off, by sampling weight (the second among the rest); then a prompt both answered is drawn
    uniformly; the two are placed on sides A and B in random order.

    The battle's messages copy the pool's text with each NUL and lone surrogate replaced by
    U+FFFD: ``pool_import`` refuses both, but a row stored before it did (SQLite keeps a lone
    surrogate in JSON) would otherwise fail to save, a 500 each time its prompt is drawn.
    """
    rng = rng or random.SystemRandom()
    # A trainer's completions waiting for judges take the visitor's turn, within their run's
    # share (arena.env.serve); one EXISTS query when no run is open.
    env_battle = env_battle_serve(session_key=session_key, rng=rng)
    if env_battle is not None:
        return env_battle
    candidates = _pool_models()
    if len(candidates) < 2:
        raise ArenaError(
            ErrorCode.NO_BATTLE_AVAILABLE,
            "The arena needs at least two active models with pool answers.",
            status=503,
        )
    # The pair by the active rule (arena.sampling), unless it is switched off.
    probabilities = pair_probabilities_active(dict(candidates)) if sampling_active() else None
    first: int | None
    second: int | None
    for _ in range(_PAIR_ATTEMPTS):
        pair = draw_pair(probabilities, rng) if probabilities else None
        if pair is not None:
            first, second = pair
        else:
            first = _weighted_pick(candidates, rng)
            second = _weighted_pick(candidates, rng, exclude=first)
        if first is None or second is None:
            break
        prompt = _shared_prompt(first, second, rng)
        if prompt is not None:
            break
    else:
        prompt = None
    if prompt is None or first is None or second is None:
        raise ArenaError(
            ErrorCode.NO_BATTLE_AVAILABLE,
            "No prompt in the pool was answered by two active models.",
            status=503,
        )
    side_a, side_b = (first, second) if rng.random() < 0.5 else (second, first)
    completions = {
        c.model_id: c
        for c in Completion.objects.select_related("model").filter(
            prompt=prompt, model_id__in=[side_a, side_b], source=Completion.Source.POOL
        )
    }
    n_turns = min(len(prompt.turns), len(completions[side_a].turns), len(completions[side_b].turns))
    with transaction.atomic():
        battle = Battle.objects.create(
            mode=Battle.Mode.ANONYMOUS,
            source=Battle.Source.POOL,
            model_a_id=side_a,
            model_b_id=side_b,
            prompt=prompt,
            session_hash=session_hash(session_key),
            state=Battle.State.READY,
        )
        BattleMessage.objects.bulk_create(
            [
                BattleMessage(
                    battle=battle,
                    side=side,
                    turn=turn,
                    user_content=text_storable(prompt.turns[turn]),
                    content=(answer := text_storable(completions[model_id].turns[turn])),
                    style=style_counts(answer),
                    names_model=answer_names_model(
                        answer,
                        model=completions[model_id].model,
                        user_turns=prompt.turns[: turn + 1],
                    ),
                    status=BattleMessage.Status.DONE,
                    finish_reason="stop",
                )
                for turn in range(n_turns)
                for side, model_id in (("a", side_a), ("b", side_b))
            ]
        )
    return battle
