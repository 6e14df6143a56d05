"""More pool answers from a model's own provider: generated variants of its answers.

A pool answer that only one text stands for is recognised by whoever has read it (MT-bench's
answers are published). ``pool_generate`` asks the model's provider, through the same
OpenAI-compatible call as the environment's reference answers (``arena.live.upstream``), for
``variants`` more answers to each pool prompt, at a temperature above 0 so that each is another
text, and stores them as pool variants (``arena.services.pool``): a pool battle shows one of a
model's variants, drawn uniformly.

A multi-turn prompt is answered turn by turn, each later turn asked after the model's own
earlier answers, as in a live battle. A prompt is written only once every turn of every one of
its variants came back (in one transaction); a failure of any call leaves that prompt as it
was and is reported with the prompt's id, and the other prompts go on. A generated text the
model already has for the prompt is counted as a duplicate and not stored twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from arena.errors import ArenaError, ErrorCode
from arena.inputs import text_storable
from arena.live.upstream import UpstreamFailed, UpstreamTarget, answer_whole
from arena.models import USER_PROMPT_SOURCE, ArenaModel, Completion, Prompt, completion_turns_hash
from arena.pool_cache import generation_bumps_deferred
from arena.services.pool import Progress, no_progress

#: The temperature of the requests when neither the caller nor the model's generation
#: parameters give one above 0 (the OpenAI API's default sampling temperature).
DEFAULT_TEMPERATURE = 1.0
MAX_VARIANTS = 20


@dataclass(frozen=True)
class PromptFailure:
    prompt_id: int
    message: str


@dataclass
class PoolGenerateResult:
    model: str
    temperature: float
    prompts: int = 0
    variants_created: int = 0
    duplicates: int = 0
    failures: list[PromptFailure] = field(default_factory=list)


def _temperature(model: ArenaModel, temperature: float | None) -> float:
    if temperature is None:
        params = model.generation_params if isinstance(model.generation_params, dict) else {}
        given = params.get("temperature")
        temperature = float(given) if isinstance(given, int | float) and given > 0 else None
    if temperature is None:
        return DEFAULT_TEMPERATURE
    if not temperature > 0:
        raise ArenaError(
            ErrorCode.INVALID,
            "The temperature must be above 0: at 0 every variant would be the same text.",
            field="temperature",
        )
    return temperature


def _pool_prompts(prompt_ids: Sequence[int] | None) -> list[Prompt]:
    """The prompts of the pool (those with a pool answer), or the ones named, in id order."""
    prompts = (
        Prompt.objects.filter(completions__source=Completion.Source.POOL)
        .exclude(source=USER_PROMPT_SOURCE)
        .exclude(source__startswith="env:")
        .distinct()
        .order_by("pk")
    )
    if prompt_ids is None:
        return list(prompts)
    found = list(prompts.filter(pk__in=prompt_ids))
    unknown = sorted(set(prompt_ids) - {p.pk for p in found})
    if unknown:
        raise ArenaError(
            ErrorCode.NOT_FOUND,
            "Not pool prompts: " + ", ".join(map(str, unknown)) + ".",
            field="prompts",
        )
    return found


def _conversation(target: UpstreamTarget, user_turns: list[str], max_tokens: int) -> list[str]:
    """The model's answer to every turn, each asked after its own earlier answers."""
    history: list[dict[str, str]] = []
    answers: list[str] = []
    for turn in user_turns:
        history.append({"role": "user", "content": turn})
        answer = text_storable(answer_whole(target, history, max_tokens=max_tokens))
        history.append({"role": "assistant", "content": answer})
        answers.append(answer)
    return answers


def pool_generate(
    *,
    model_slug: str,
    variants: int,
    prompt_ids: Sequence[int] | None = None,
    temperature: float | None = None,
    progress: Progress = no_progress,
) -> PoolGenerateResult:
    """Ask the model's provider for ``variants`` answers to each pool prompt (or to those of
    ``prompt_ids``) and store the new texts as the model's pool variants.

    ``temperature`` defaults to the model's own when above 0, else ``DEFAULT_TEMPERATURE``.
    Raises ``ArenaError`` before any call for an unknown model, a model without a provider, a
    variant count outside 1..``MAX_VARIANTS``, a temperature of 0 or less, or ids that are not
    pool prompts; a failing call is reported in ``failures`` (per prompt), not raised.
    """
    model = ArenaModel.objects.select_related("provider").filter(slug=model_slug).first()
    if model is None:
        raise ArenaError(ErrorCode.NOT_FOUND, f"No model {model_slug!r}.", field="model")
    if not model.is_live:
        raise ArenaError(
            ErrorCode.INVALID,
            f"{model_slug} has no provider and upstream model to ask.",
            field="model",
        )
    if not 1 <= variants <= MAX_VARIANTS:
        raise ArenaError(
            ErrorCode.INVALID,
            f"The number of variants must be between 1 and {MAX_VARIANTS}.",
            field="variants",
        )
    chosen = _temperature(model, temperature)
    prompts = _pool_prompts(prompt_ids)
    base = UpstreamTarget.for_model(model)
    target = dataclasses.replace(base, params={**base.params, "temperature": chosen})
    max_tokens = int(settings.ARENA_LIVE_MAX_OUTPUT_TOKENS)
    result = PoolGenerateResult(model=model.slug, temperature=chosen, prompts=len(prompts))
    for prompt in progress(prompts, desc=f"asking {model.slug}"):
        user_turns = [str(turn) for turn in prompt.turns]
        try:
            answers = [_conversation(target, user_turns, max_tokens) for _ in range(variants)]
        except UpstreamFailed as exc:
            result.failures.append(PromptFailure(prompt_id=prompt.pk, message=str(exc)))
            continue
        with generation_bumps_deferred(), transaction.atomic():
            for turns in answers:
                _, created = Completion.objects.get_or_create(
                    prompt=prompt,
                    model=model,
                    source=Completion.Source.POOL,
                    turns_hash=completion_turns_hash(turns),
                    defaults={"turns": turns},
                )
                if created:
                    result.variants_created += 1
                else:
                    result.duplicates += 1
    return result
