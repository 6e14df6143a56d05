"""Drawing the two models of a live battle.

Anonymous mode draws two different available models (``arena.selectors.live_models_available``:
active, live, positive weight, provider's breaker not open) by the active pair rule
(``arena.sampling.stats``; by sampling weight when it is off) and places them in random
order; named mode takes the two the visitor picked, in that order. A prompt with images is
drawn from the vision-capable models only (``ArenaModel.supports_images``), and named mode
refuses a pick that is not.

Both read the live models from the process's copy (``arena.pool_cache``: one cache round trip,
no query while no model, provider, breaker or limit changed) and compare each provider's breaker
with the clock here, so a cool-down's end needs no write. The models returned are copies: the
kept ones are shared by every request of the process.
"""

import copy
import random

from django.utils import timezone
from django.utils.translation import gettext

from arena.errors import ArenaError, ErrorCode
from arena.inputs import text_problem
from arena.models import ArenaModel
from arena.pool_cache import PoolCache, pool_cache
from arena.sampling import rule
from arena.sampling.stats import pair_probabilities_active, sampling_active


def _available(kept: PoolCache) -> list[ArenaModel]:
    """As ``arena.selectors.live_models_available``: positive weight, breaker not open."""
    now = timezone.now()

    def breaker_closed(model: ArenaModel) -> bool:
        if model.provider is None:  # not live (the kept list has none)
            return False
        until = model.provider.breaker_open_until
        return until is None or until <= now

    return [m for m in kept.live_models() if m.sampling_weight > 0 and breaker_closed(m)]


def live_models_ready(kept: PoolCache | None = None) -> list[ArenaModel]:
    """The live models a battle may call now (``_available``), as copies."""
    return [copy.copy(m) for m in _available(kept or pool_cache())]


def _own(a: ArenaModel, b: ArenaModel) -> tuple[ArenaModel, ArenaModel]:
    return copy.copy(a), copy.copy(b)


def _too_few_vision_models() -> ArenaError:
    return ArenaError(
        ErrorCode.NO_LIVE_MODELS,
        gettext(
            "Fewer than two vision-capable models are available right now, so a prompt with "
            "images cannot be answered; send it without images, or try again later."
        ),
        status=503,
        field="images",
    )


def draw_pair(
    rng: random.Random, kept: PoolCache | None = None, *, vision: bool = False
) -> tuple[ArenaModel, ArenaModel]:
    candidates = _available(kept or pool_cache())
    if vision:
        candidates = [m for m in candidates if m.supports_images]
        if len(candidates) < 2:
            raise _too_few_vision_models()
    if len(candidates) < 2:
        raise ArenaError(
            ErrorCode.NO_LIVE_MODELS,
            gettext("Fewer than two live models are available right now; try again shortly."),
            status=503,
        )
    if sampling_active():
        # The active pair rule (arena.sampling.rule): from the latest snapshot, weights and a floor.
        by_id = {m.pk: m for m in candidates}
        probabilities = pair_probabilities_active({m.pk: m.sampling_weight for m in candidates})
        if probabilities:
            a, b = rule.draw_pair(probabilities, rng)
            return _own(by_id[a], by_id[b])
    first = rng.choices(candidates, weights=[m.sampling_weight for m in candidates], k=1)[0]
    rest = [m for m in candidates if m.pk != first.pk]
    second = rng.choices(rest, weights=[m.sampling_weight for m in rest], k=1)[0]
    return _own(first, second) if rng.random() < 0.5 else _own(second, first)


def named_pair(
    model_slugs: object, kept: PoolCache | None = None, *, vision: bool = False
) -> tuple[ArenaModel, ArenaModel]:
    if (
        not isinstance(model_slugs, list | tuple)
        or len(model_slugs) != 2
        or not all(isinstance(s, str) for s in model_slugs)
    ):
        raise ArenaError(ErrorCode.INVALID, gettext("Pick two models."), field="models")
    for slug in model_slugs:
        problem = text_problem(slug)
        if problem is not None:  # the database refuses it even as a query parameter
            raise ArenaError(
                ErrorCode.INVALID,
                gettext("A model's name %(problem)s.") % {"problem": problem},
                field="models",
            )
    if model_slugs[0] == model_slugs[1]:
        raise ArenaError(ErrorCode.INVALID, gettext("Pick two different models."), field="models")
    found = {
        m.slug: m
        for m in (kept or pool_cache()).live_models()
        if m.slug in model_slugs and m.is_public and m.is_live
    }
    missing = [s for s in model_slugs if s not in found]
    if missing:
        raise ArenaError(
            ErrorCode.INVALID,
            gettext("Unknown or unavailable model: %(models)s.") % {"models": ", ".join(missing)},
            field="models",
        )
    if vision:
        blind = [s for s in model_slugs if not found[s].supports_images]
        if blind:
            raise ArenaError(
                ErrorCode.INVALID,
                gettext("Not vision-capable, so it cannot take images: %(models)s.")
                % {"models": ", ".join(blind)},
                field="images",
            )
    return _own(found[model_slugs[0]], found[model_slugs[1]])
