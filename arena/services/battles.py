"""Starting battles from the prompt pool."""

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.utils.translation import gettext

from arena.battle_sources import battle_sources_serve
from arena.errors import ArenaError, ErrorCode
from arena.identity import session_hash
from arena.models import Battle, BattleMessage
from arena.pool_cache import pool_cache
from arena.sampling.rule import draw_pair
from arena.sampling.stats import pair_probabilities_active, sampling_active
from arena.services.bridge import bridge_battle_serve

_PAIR_ATTEMPTS = 20


def _weighted_pick(
    candidates: Sequence[tuple[int, float]], rng: random.Random, exclude: int | None = None
) -> int | None:
    pool = [(pk, w) for pk, w in candidates if pk != exclude and w > 0]
    if not pool:
        return None
    return rng.choices([pk for pk, _ in pool], weights=[w for _, w in pool], k=1)[0]


@dataclass(frozen=True)
class StartedBattle:
    """A battle just served, with its messages when they are known without a read (a pool
    battle's: created here), for a payload that reads nothing back."""

    battle: Battle
    messages: list[BattleMessage] | None
    # The ids of the prompt's images, when known without a read (a pool battle's).
    image_ids: tuple[uuid.UUID, ...] | None = None


def battle_start_pool(*, session_key: str, rng: random.Random | None = None) -> StartedBattle:
    """Serve a pool battle: a prompt and the answers of two different active models.

    The two models are drawn by the active pair rule (``arena.sampling.rule``, from the latest
    snapshot, mixed with the sampling weights and a floor) or, with ``ARENA_ACTIVE_SAMPLING``
    off, by sampling weight (the second among the rest); then a prompt both answered is drawn
    uniformly; the two are placed on sides A and B in random order, and each side shows one of
    its model's pool answers to that prompt (its variants, ``arena.services.pool``), drawn
    uniformly. Which variant a side showed is its messages' text (``Completion.turns_hash`` of
    the stored turns finds it), so the draw writes nothing more than before. While a live model
    is preliminary, ``ARENA_BRIDGE_SHARE`` of the draws serve a mixed battle for it instead
    (``arena.services.bridge``): its live side streams over the battle websocket.

    The battle's messages copy the pool's text with each NUL and lone surrogate replaced by
    U+FFFD: ``pool_import`` refuses both, but a row stored before it did (SQLite keeps a lone
    surrogate in JSON) would otherwise fail to save, a 500 each time its prompt is drawn. Their
    style counts and identity-leak checks are made once per pool answer and process, when it is
    first read (``arena.pool_cache``), as are the reads of the models and prompts drawn from.
    """
    rng = rng or random.SystemRandom()
    # What the draw reads and rarely changes, kept per process (arena.pool_cache).
    kept = pool_cache()
    # A trainer's completions waiting for judges take the visitor's turn, within their run's
    # share (the environment app's battle source, ``arena.battle_sources``), while some run is
    # open.
    if kept.env_runs_open():
        env_battle = battle_sources_serve(session_key=session_key, rng=rng)
        if env_battle is not None:
            return StartedBattle(battle=env_battle, messages=None)
    # A live model not yet established on the board takes its share of the draws as mixed
    # battles against the pool's models (arena.services.bridge), so its votes connect.
    mixed = bridge_battle_serve(session_key=session_key, rng=rng, kept=kept)
    if mixed is not None:
        return StartedBattle(battle=mixed[0], messages=mixed[1])
    candidates = kept.pool_models()
    if len(candidates) < 2:
        raise ArenaError(
            ErrorCode.NO_BATTLE_AVAILABLE,
            gettext("The arena needs at least two active models with pool answers."),
            status=503,
        )
    # The pair by the active rule (arena.sampling.rule), unless it is switched off.
    probabilities = pair_probabilities_active(dict(candidates)) if sampling_active() else None
    first: int | None
    second: int | None
    prompt_id: int | None = None
    for _ in range(_PAIR_ATTEMPTS):
        pair = draw_pair(probabilities, rng) if probabilities else None
        if pair is not None:
            first, second = pair
        else:
            first = _weighted_pick(candidates, rng)
            second = _weighted_pick(candidates, rng, exclude=first)
        if first is None or second is None:
            break
        prompt_ids = kept.shared_prompts(first, second)
        if prompt_ids:
            prompt_id = rng.choice(prompt_ids)
            break
    else:
        prompt_id = None
    if prompt_id is None or first is None or second is None:
        raise ArenaError(
            ErrorCode.NO_BATTLE_AVAILABLE,
            gettext("No prompt in the pool was answered by two active models."),
            status=503,
        )
    side_a, side_b = (first, second) if rng.random() < 0.5 else (second, first)
    # One of each model's variants of its answer to the prompt, drawn uniformly.
    answers = kept.answers(prompt_id, [side_a, side_b], rng)
    n_turns = min(len(answers[side_a]), len(answers[side_b]))
    with transaction.atomic():
        battle = Battle.objects.create(
            mode=Battle.Mode.ANONYMOUS,
            source=Battle.Source.POOL,
            model_a_id=side_a,
            model_b_id=side_b,
            prompt_id=prompt_id,
            session_hash=session_hash(session_key),
            state=Battle.State.READY,
        )
        messages = BattleMessage.objects.bulk_create(
            [
                BattleMessage(
                    battle=battle,
                    side=side,
                    turn=turn,
                    user_content=(answer := answers[model_id][turn]).user_content,
                    content=answer.content,
                    style=answer.style,
                    names_model=answer.names_model,
                    status=BattleMessage.Status.DONE,
                    finish_reason="stop",
                )
                for turn in range(n_turns)
                for side, model_id in (("a", side_a), ("b", side_b))
            ]
        )
    return StartedBattle(
        battle=battle, messages=messages, image_ids=kept.prompt_image_ids(prompt_id)
    )
