"""Per-process copies of what a pool battle reads and rarely changes, kept valid by a generation
stored in the shared cache.

Every pool battle reads the same rows until an operator changes a model or imports a pool: the
active models with pool answers and their weights, the prompts each pair of them answered, the
answers' text (every variant of a model's answer) with their style counts and identity-leak
checks, the ids of each prompt's images, and whether any environment run is open. Each process keeps its own copy of these,
valid while the generation token stored in the shared cache (Redis in production: one
``get_many`` per battle) is the one the copy was read under:

- saving or deleting an ``ArenaModel``, ``Prompt`` or ``Completion`` starts a new pool
  generation, and saving or deleting an ``EnvRun`` (its state; the environment app's receivers
  call ``generation_bump_now_and_after_commit``) a new environment generation, at once and again
  after the transaction commits (a process that read the old rows between the write and the
  commit reads them again);
- a write that sends no signal (a queryset ``update()``) is seen within ``MAX_AGE_SECONDS``:
  no copy is older;
- while the shared cache is unreachable (or was flushed) the generation is new on every read, so
  every battle reads the database, as without this module.

A live battle's start keeps the "live" scope: the active live models with their providers (the
breaker's state included; the caller compares it with the clock, so a cool-down's end needs no
write) and the *Live battle limits*. Saving or deleting a ``Provider`` or ``LiveLimits``, a change
of the circuit breaker (``arena.live.breaker`` bumps it where it writes with ``update()``), a
changed ``ARENA_LIVE_*`` setting and every new pool generation (the models are the same rows)
start a new live generation.

Without Redis (the local settings' per-process memory cache) a change made by another process,
such as an import command beside a running server, is seen within ``MAX_AGE_SECONDS``.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

from django.core.cache import cache
from django.core.signals import setting_changed
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from answer_style import AnswerStyle, style_counts
from arena.battle_sources import battle_sources_open
from arena.inputs import text_storable
from arena.leaks import answer_names_model
from arena.models import (
    USER_PROMPT_SOURCE,
    ArenaModel,
    Completion,
    LiveLimits,
    Prompt,
    PromptImage,
    Provider,
)
from arena.selectors import Limits, live_limits
from arena.signals import after_commit

Scope = Literal["pool", "env", "live"]
GENERATION_KEYS: dict[Scope, str] = {
    "pool": "arena:generation:pool:v1",
    "env": "arena:generation:env:v1",
    "live": "arena:generation:live:v1",
}
# Scopes whose copies are read from the rows of another's: a new generation of the key is one
# of each value too (their copies are valid under both tokens).
_FOLLOWERS: dict[Scope, tuple[Scope, ...]] = {"pool": ("live",)}
# The oldest a copy may be, for writes that send no signal.
MAX_AGE_SECONDS = 30.0
# Answers (prompt, model: all its variants) kept per process: a pool of any size costs bounded
# memory.
MAX_ANSWERS = 20_000

T = TypeVar("T")


@dataclass(frozen=True)
class PoolTurn:
    """One turn of a pool answer as a battle message stores it."""

    user_content: str
    content: str
    style: AnswerStyle
    names_model: bool


class _Copies:
    """One scope's values, for one generation."""

    def __init__(self) -> None:
        self.generation: str | None = None
        self.values: OrderedDict[Any, tuple[float, Any]] = OrderedDict()


_lock = threading.Lock()
_copies: dict[Scope, _Copies] = {scope: _Copies() for scope in GENERATION_KEYS}


def _generations() -> dict[Scope, str]:
    """The current token of each scope (one round trip), a new one where none is stored.

    The production cache (``arena.cache.FallbackRedisCache``) answers a miss while Redis is
    down, and a miss means a token no copy was read under: the database is read.
    """
    stored = cache.get_many(list(GENERATION_KEYS.values()))
    tokens: dict[Scope, str] = {}
    for scope, key in GENERATION_KEYS.items():
        token = stored.get(key)
        if not isinstance(token, str):
            token = uuid.uuid4().hex
            if not cache.add(key, token, timeout=None):
                token = cache.get(key) or token
        tokens[scope] = token
    for leader, followers in _FOLLOWERS.items():
        for follower in followers:
            tokens[follower] = f"{tokens[follower]}:{tokens[leader]}"
    return tokens


class PoolCache:
    """The copies valid for this request's generations (``pool_cache()``)."""

    def __init__(self, tokens: dict[Scope, str]) -> None:
        self.tokens = tokens
        with _lock:
            for scope, token in tokens.items():
                if _copies[scope].generation != token:
                    _copies[scope].generation = token
                    _copies[scope].values = OrderedDict()

    def _lookup(self, scope: Scope, key: Any) -> Any | None:
        copies = _copies[scope]
        with _lock:
            if copies.generation != self.tokens[scope]:
                return None
            hit = copies.values.get(key)
            if hit is None or time.monotonic() - hit[0] >= MAX_AGE_SECONDS:
                return None
            copies.values.move_to_end(key)
            return hit[1]

    def _store(self, scope: Scope, key: Any, value: Any, limit: int = 0) -> None:
        copies = _copies[scope]
        with _lock:
            # A copy read under a generation that ended meanwhile is not kept.
            if copies.generation != self.tokens[scope]:
                return
            copies.values[key] = (time.monotonic(), value)
            copies.values.move_to_end(key)
            while limit and len(copies.values) > limit:
                copies.values.popitem(last=False)

    def _get(self, scope: Scope, key: Any, load: Callable[[], T]) -> T:
        hit = self._lookup(scope, key)
        if hit is not None:
            return cast(T, hit)
        value = load()
        self._store(scope, key, value)
        return value

    def env_runs_open(self) -> bool:
        """Whether any environment run is open: whether a registered battle source
        (``arena.battle_sources``, the environment app's) is open."""
        return self._get("env", "open", battle_sources_open)

    def pool_models(self) -> list[tuple[int, float]]:
        """Active models with a positive weight and at least one pool answer: (id, weight)."""
        return self._get(
            "pool",
            "models",
            lambda: list(
                ArenaModel.objects.filter(
                    is_active=True,
                    sampling_weight__gt=0,
                    completions__source=Completion.Source.POOL,
                )
                .distinct()
                .values_list("id", "sampling_weight")
            ),
        )

    def shared_prompts(self, model_a: int, model_b: int) -> list[int]:
        """The pool prompts both models answered, by id (in id order)."""
        low, high = sorted((model_a, model_b))

        def load() -> list[int]:
            answered_by_high = Completion.objects.filter(
                model_id=high, source=Completion.Source.POOL
            ).values("prompt_id")
            return sorted(
                Completion.objects.filter(
                    model_id=low, source=Completion.Source.POOL, prompt_id__in=answered_by_high
                ).values_list("prompt_id", flat=True)
            )

        return self._get("pool", ("pair", low, high), load)

    def prompt_image_ids(self, prompt_id: int) -> tuple[uuid.UUID, ...]:
        """The ids of the prompt's images, in order (empty for most prompts)."""
        return self._get(
            "pool",
            ("images", prompt_id),
            lambda: tuple(
                PromptImage.objects.filter(prompt_id=prompt_id)
                .order_by("position")
                .values_list("pk", flat=True)
            ),
        )

    def model_prompts(self, model_id: int) -> list[int]:
        """The pool prompts the model answered, by id (in id order)."""
        return self._get(
            "pool",
            ("prompts", model_id),
            lambda: sorted(
                Completion.objects.filter(
                    model_id=model_id, source=Completion.Source.POOL
                ).values_list("prompt_id", flat=True)
            ),
        )

    def live_models(self) -> list[ArenaModel]:
        """Active models with a provider and an upstream model, their providers joined, by id.

        Shared by every request of the process: callers copy a model before changing it. The
        breaker's ``breaker_open_until`` is as read; the caller compares it with the clock.
        """
        return self._get(
            "live",
            "models",
            lambda: list(
                ArenaModel.objects.filter(is_active=True, provider__isnull=False)
                .exclude(upstream_model_id="")
                .select_related("provider")
                .order_by("id")
            ),
        )

    def live_limits(self) -> Limits:
        """The live limits in force (``arena.selectors.live_limits``)."""
        return self._get("live", "limits", live_limits)

    def variants(self, prompt_id: int, model_ids: list[int]) -> dict[int, list[list[PoolTurn]]]:
        """Each model's pool answers (its variants, in the order they were stored) to the
        prompt, turn by turn, as battle messages store them (one query for those not kept yet).
        A model with no pool answer to it is left out."""
        found: dict[int, list[list[PoolTurn]]] = {}
        for model_id in model_ids:
            hit = self._lookup("pool", ("answer", prompt_id, model_id))
            if hit is not None:
                found[model_id] = hit
        missing = [m for m in model_ids if m not in found]
        if missing:
            for model_id, variants in _load_answers(prompt_id, missing).items():
                self._store("pool", ("answer", prompt_id, model_id), variants, limit=MAX_ANSWERS)
                found[model_id] = variants
        return found

    def answers(
        self, prompt_id: int, model_ids: list[int], rng: random.Random
    ) -> dict[int, list[PoolTurn]]:
        """One pool answer of each model to the prompt: one of its variants, drawn uniformly
        with ``rng`` (``variants``)."""
        return {
            model_id: rng.choice(variants)
            for model_id, variants in self.variants(prompt_id, model_ids).items()
        }


def _load_answers(prompt_id: int, model_ids: list[int]) -> dict[int, list[list[PoolTurn]]]:
    """The pool answers of these models to the prompt (one query), each model's variants in id
    order, each turn's text made storable, its style counted and its identity-leak check made
    once, here."""
    answers: dict[int, list[list[PoolTurn]]] = {}
    for completion in (
        Completion.objects.select_related("model", "prompt")
        .filter(prompt_id=prompt_id, model_id__in=model_ids, source=Completion.Source.POOL)
        .order_by("pk")
    ):
        prompt: Prompt = completion.prompt
        turns: list[PoolTurn] = []
        for turn in range(min(len(prompt.turns), len(completion.turns))):
            answer = text_storable(completion.turns[turn])
            turns.append(
                PoolTurn(
                    user_content=text_storable(prompt.turns[turn]),
                    content=answer,
                    style=style_counts(answer),
                    names_model=answer_names_model(
                        answer, model=completion.model, user_turns=prompt.turns[: turn + 1]
                    ),
                )
            )
        answers.setdefault(completion.model_id, []).append(turns)
    return answers


def pool_cache() -> PoolCache:
    """The process's copies, checked against the shared generations (one cache round trip)."""
    return PoolCache(_generations())


def generation_bump(scope: Scope) -> None:
    """Start a new generation of ``scope``: every process reads those rows again."""
    scopes = (scope, *_FOLLOWERS.get(scope, ()))
    with _lock:
        for each in scopes:
            _copies[each].generation = None
            _copies[each].values = OrderedDict()
    cache.set(GENERATION_KEYS[scope], uuid.uuid4().hex, timeout=None)


# The scopes a ``generation_bumps_deferred`` block's writes changed (None: not in one).
_deferred: ContextVar[set[Scope] | None] = ContextVar("arena_pool_cache_deferred", default=None)


@contextmanager
def generation_bumps_deferred() -> Iterator[None]:
    """A bulk write (a pool import: a prompt and a completion a line) starts each generation its
    rows change once, when the block ends, instead of twice a row."""
    if _deferred.get() is not None:  # an outer block bumps
        yield
        return
    scopes: set[Scope] = set()
    token = _deferred.set(scopes)
    try:
        yield
    finally:
        _deferred.reset(token)
        for scope in sorted(scopes):
            generation_bump_now_and_after_commit(scope)


def generation_bump_now_and_after_commit(scope: Scope) -> None:
    """Start a new generation of ``scope`` now and, inside a transaction, again after its commit
    (a process that read the old rows in between would otherwise keep them)."""
    pending = _deferred.get()
    if pending is not None:
        pending.add(scope)
        return
    generation_bump(scope)
    if transaction.get_connection().in_atomic_block:
        after_commit(lambda: generation_bump(scope))


@receiver(post_save, sender=ArenaModel, dispatch_uid="arena.pool_cache.model_saved")
@receiver(post_delete, sender=ArenaModel, dispatch_uid="arena.pool_cache.model_deleted")
@receiver(post_delete, sender=Prompt, dispatch_uid="arena.pool_cache.prompt_deleted")
@receiver(post_delete, sender=Completion, dispatch_uid="arena.pool_cache.completion_deleted")
def _pool_changed(**kwargs: Any) -> None:
    generation_bump_now_and_after_commit("pool")


@receiver(post_save, sender=Prompt, dispatch_uid="arena.pool_cache.prompt_saved")
def _prompt_saved(*, instance: Prompt, created: bool, **kwargs: Any) -> None:
    # A new prompt (each live battle's, each environment submission's) has no pool answer yet,
    # and a visitor's prompt never gets one: its follow-up turns (saved on every live turn
    # added) leave every process's copies alone.
    if not created and instance.source != USER_PROMPT_SOURCE:
        generation_bump_now_and_after_commit("pool")


@receiver(post_save, sender=Completion, dispatch_uid="arena.pool_cache.completion_saved")
def _completion_saved(*, instance: Completion, created: bool, **kwargs: Any) -> None:
    # A new reference answer (environment) is no pool answer; any changed completion may have been.
    if not created or instance.source == Completion.Source.POOL:
        generation_bump_now_and_after_commit("pool")


@receiver(post_save, sender=Provider, dispatch_uid="arena.pool_cache.provider_saved")
@receiver(post_delete, sender=Provider, dispatch_uid="arena.pool_cache.provider_deleted")
@receiver(post_save, sender=LiveLimits, dispatch_uid="arena.pool_cache.live_limits_saved")
@receiver(post_delete, sender=LiveLimits, dispatch_uid="arena.pool_cache.live_limits_deleted")
def _live_changed(**kwargs: Any) -> None:
    generation_bump_now_and_after_commit("live")


@receiver(setting_changed, dispatch_uid="arena.pool_cache.setting_changed")
def _live_setting_changed(*, setting: str, **kwargs: Any) -> None:
    # The limits kept fall back on these settings (tests change them; a server never does).
    if setting.startswith("ARENA_LIVE_"):
        generation_bump("live")
