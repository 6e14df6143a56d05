"""Mixed battles: how a new live model joins the pool models' board.

A live model answers visitors' own prompts against other live models, so its votes never meet
the pool's models (which answer only from stored answers): the rating engine then lists it as
``not_connected`` and cannot put it on their scale. A *mixed* battle bridges the two: a pool
prompt, one side the stored pool answer of a model that answered it, the other side a live
model answering the same user turns live (``arena.live.turns.battle_mixed_stream``, over the
battle websocket). Its vote is an ordinary anonymous vote and counts for the leaderboard.

While a live model is *preliminary* in the latest snapshot (fewer than
``RATINGS_ESTABLISHED_MIN_VOTES`` rated votes on the connected board, not connected, or new),
``ARENA_BRIDGE_SHARE`` of the pool draws serve a mixed battle for one such model (by sampling
weight); its opponent is an established model with pool answers when there is one, any model
with pool answers otherwise. Which models are established is read from the statistics the
ratings side hands over after each snapshot (``arena.sampling.stats.established_models``);
before any snapshot every live model counts as preliminary.
"""

from __future__ import annotations

import random

from django.conf import settings
from django.db import transaction

from arena.identity import session_hash
from arena.live.draw import live_models_ready
from arena.models import ArenaModel, Battle, BattleMessage
from arena.pool_cache import PoolCache
from arena.sampling.stats import established_models


def bridge_models(kept: PoolCache) -> list[ArenaModel]:
    """The live models the draw bridges now: callable (active, live, positive weight, breaker
    closed) and not established in the latest snapshot."""
    ready = live_models_ready(kept)
    if not ready:
        # Most pool draws: no live model at all, so the snapshot's statistics are not read.
        return ready
    established = established_models()
    if established is None:
        return ready
    return [m for m in ready if m.pk not in established]


def bridge_battle_serve(
    *, session_key: str, rng: random.Random, kept: PoolCache
) -> tuple[Battle, list[BattleMessage]] | None:
    """A mixed battle for a preliminary live model, ``ARENA_BRIDGE_SHARE`` of the time while
    there is one (None otherwise, and when no model with pool answers can face it)."""
    share = float(settings.ARENA_BRIDGE_SHARE)
    if share <= 0:
        return None
    candidates = bridge_models(kept)
    if not candidates or rng.random() >= share:
        return None
    live = rng.choices(candidates, weights=[m.sampling_weight for m in candidates], k=1)[0]
    return battle_start_mixed(session_key=session_key, live_model=live, rng=rng, kept=kept)


def battle_start_mixed(
    *, session_key: str, live_model: ArenaModel, rng: random.Random, kept: PoolCache
) -> tuple[Battle, list[BattleMessage]] | None:
    """Create a mixed battle for ``live_model``: a pool prompt and an opponent's stored answer.

    The opponent is drawn by sampling weight among the established models with pool answers
    (any model with pool answers when none is established), never the live model itself; a
    prompt it answered is drawn uniformly; the sides are placed in random order. The stored
    side's messages (every turn, up to the live limits' turns) are saved now, so the page shows
    them at once; the live side has none until the page asks the battle socket to stream it.
    The battle is ``streaming`` until the live side has answered every turn.
    """
    opponents = [(pk, w) for pk, w in kept.pool_models() if pk != live_model.pk and w > 0]
    established = established_models() or frozenset()
    preferred = [(pk, w) for pk, w in opponents if pk in established] or opponents
    if not preferred:
        return None
    opponent = rng.choices([pk for pk, _ in preferred], weights=[w for _, w in preferred], k=1)[0]
    prompt_ids = kept.model_prompts(opponent)
    if not prompt_ids:
        return None
    prompt_id = rng.choice(prompt_ids)
    stored = kept.answers(prompt_id, [opponent], rng).get(opponent) or []
    stored = stored[: kept.live_limits().max_turns]
    if not stored:
        return None
    live_side, stored_side = ("a", "b") if rng.random() < 0.5 else ("b", "a")
    models = {live_side: live_model.pk, stored_side: opponent}
    with transaction.atomic():
        battle = Battle.objects.create(
            mode=Battle.Mode.ANONYMOUS,
            source=Battle.Source.MIXED,
            model_a_id=models["a"],
            model_b_id=models["b"],
            prompt_id=prompt_id,
            session_hash=session_hash(session_key),
            state=Battle.State.STREAMING,
            live_side=live_side,
        )
        messages = BattleMessage.objects.bulk_create(
            [
                BattleMessage(
                    battle=battle,
                    side=stored_side,
                    turn=turn,
                    user_content=answer.user_content,
                    content=answer.content,
                    style=answer.style,
                    names_model=answer.names_model,
                    status=BattleMessage.Status.DONE,
                    finish_reason="stop",
                )
                for turn, answer in enumerate(stored)
            ]
        )
    return battle, messages
