"""Drawing the two models of a live battle.

Anonymous mode draws two different available models (``arena.selectors.live_models_available``:
active, live, positive weight, provider's breaker not open) by the active pair rule
(``arena.sampling_stats``; by sampling weight when it is off) and places them in random
order; named mode takes the two the visitor picked, in that order.
"""

import random

from arena import sampling
from arena.errors import ArenaError, ErrorCode
from arena.inputs import text_problem
from arena.models import ArenaModel
from arena.sampling_stats import pair_probabilities_active, sampling_active
from arena.selectors import live_models_available


def draw_pair(rng: random.Random) -> tuple[ArenaModel, ArenaModel]:
    candidates = list(live_models_available())
    if len(candidates) < 2:
        raise ArenaError(
            ErrorCode.NO_LIVE_MODELS,
            "Fewer than two live models are available right now; try again shortly.",
            status=503,
        )
    if sampling_active():
        # The active pair rule (arena.sampling): from the latest snapshot, weights and a floor.
        by_id = {m.pk: m for m in candidates}
        probabilities = pair_probabilities_active({m.pk: m.sampling_weight for m in candidates})
        if probabilities:
            a, b = sampling.draw_pair(probabilities, rng)
            return by_id[a], by_id[b]
    first = rng.choices(candidates, weights=[m.sampling_weight for m in candidates], k=1)[0]
    rest = [m for m in candidates if m.pk != first.pk]
    second = rng.choices(rest, weights=[m.sampling_weight for m in rest], k=1)[0]
    return (first, second) if rng.random() < 0.5 else (second, first)


def named_pair(model_slugs: object) -> tuple[ArenaModel, ArenaModel]:
    if (
        not isinstance(model_slugs, list | tuple)
        or len(model_slugs) != 2
        or not all(isinstance(s, str) for s in model_slugs)
    ):
        raise ArenaError(ErrorCode.INVALID, "Pick two models.", field="models")
    for slug in model_slugs:
        problem = text_problem(slug)
        if problem is not None:  # the database refuses it even as a query parameter
            raise ArenaError(ErrorCode.INVALID, f"A model's name {problem}.", field="models")
    if model_slugs[0] == model_slugs[1]:
        raise ArenaError(ErrorCode.INVALID, "Pick two different models.", field="models")
    found = {
        m.slug: m
        for m in ArenaModel.objects.filter(
            slug__in=model_slugs, is_active=True, is_public=True
        ).select_related("provider")
        if m.is_live
    }
    missing = [s for s in model_slugs if s not in found]
    if missing:
        raise ArenaError(
            ErrorCode.INVALID,
            f"Unknown or unavailable model: {', '.join(missing)}.",
            field="models",
        )
    return found[model_slugs[0]], found[model_slugs[1]]
