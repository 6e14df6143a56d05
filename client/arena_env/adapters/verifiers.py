"""Reward functions in the shape verifiers' ``Rubric`` calls, scored by the arena's visitors.

A verifiers rubric calls an individual reward function once per rollout, concurrently for
the rollouts of a group, passing the arguments it names (``prompt``, ``completion``,
``answer``, ``state``, ``info``, ``task``...); a group reward function gets the plural
(``prompts``, ``completions``...) and returns one score per rollout. ``human_reward`` builds
the first kind: calls with the same prompt that arrive within ``window`` seconds of each other
are submitted together as one group (up to ``group_size``), so the visitors compare them with
each other; a lone call is a one-completion group, judged against the run's references.
``human_group_reward`` builds the second kind. Both return ``missing`` for a completion not
judged within ``timeout``, and put the reward record in ``state["arena_reward"]`` when the
rubric passes a state. verifiers is not imported.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from arena_env.adapters.trl import Value, group_spans, reward_value
from arena_env.client import (
    MAX_GROUP,
    ArenaEnv,
    ArenaEnvError,
    Reward,
    completion_text,
    prompt_messages,
)

__all__ = ["human_group_reward", "human_reward"]


@dataclass
class _Batch:
    prompt: Any
    texts: list[str] = field(default_factory=list)
    futures: list[asyncio.Future[Reward | None]] = field(default_factory=list)
    flushing: bool = False


PendingKey = tuple[asyncio.AbstractEventLoop, str]


def _prompt_key(prompt: Any) -> str:
    return json.dumps(prompt, sort_keys=True, default=str)


def _record_state(state: Any, record: Reward | None) -> None:
    if isinstance(state, dict) and record is not None:
        state["arena_reward"] = asdict(record)


def human_reward(
    env: ArenaEnv,
    run_id: str,
    *,
    timeout: float,
    group_size: int = MAX_GROUP,
    window: float = 0.1,
    poll: float = 2.0,
    value: Value = "score",
    missing: float = 0.0,
    name: str = "human_reward",
) -> Callable[..., Awaitable[float]]:
    """``async def f(prompt, completion, answer=None, state=None, **kwargs) -> float``."""
    if not 1 <= group_size <= MAX_GROUP:
        raise ValueError(f"group_size is between 1 and {MAX_GROUP}")
    # Groups still taking calls, per event loop and prompt.
    pending: dict[PendingKey, _Batch] = {}
    background: set[asyncio.Task[None]] = set()  # strong references until the tasks finish

    async def flush(key: PendingKey, batch: _Batch) -> None:
        if batch.flushing:
            return
        batch.flushing = True
        if pending.get(key) is batch:
            del pending[key]
        try:
            submission = await asyncio.to_thread(env.submit, run_id, batch.prompt, batch.texts)
            if len(submission.completion_ids) != len(batch.futures):
                raise ArenaEnvError(
                    0,
                    "bad_response",
                    f"{len(submission.completion_ids)} ids for {len(batch.futures)} completions",
                )
            records = await asyncio.to_thread(
                env.wait, run_id, submission.completion_ids, timeout, poll
            )
        except Exception as error:  # every waiting caller sees the failure
            for future in batch.futures:
                if not future.done():
                    future.set_exception(error)
            return
        for future, cid in zip(batch.futures, submission.completion_ids, strict=True):
            if not future.done():
                future.set_result(records.get(cid))

    async def flush_later(key: PendingKey, batch: _Batch) -> None:
        try:
            await asyncio.sleep(window)
        except asyncio.CancelledError:  # the loop is closing: no call may join this group
            if pending.get(key) is batch:
                del pending[key]
            for future in batch.futures:
                future.cancel()
            raise
        await flush(key, batch)

    async def reward(
        prompt: Any, completion: Any, answer: Any = None, state: Any = None, **kwargs: Any
    ) -> float:
        messages = prompt_messages(prompt)
        loop = asyncio.get_running_loop()
        key = (loop, _prompt_key(messages))
        future: asyncio.Future[Reward | None] = loop.create_future()
        batch = pending.get(key)
        if batch is None:
            batch = pending[key] = _Batch(prompt=messages)
            task = asyncio.create_task(flush_later(key, batch))
            background.add(task)
            task.add_done_callback(background.discard)
        batch.texts.append(completion_text(completion))
        batch.futures.append(future)
        if len(batch.texts) >= group_size:
            # Full: the next call with this prompt starts a new group, even before this
            # group's flush has begun.
            del pending[key]
            task = asyncio.create_task(flush(key, batch))
            background.add(task)
            task.add_done_callback(background.discard)
        record = await future
        _record_state(state, record)
        score = reward_value(record, value=value)
        return missing if score is None else score

    reward.__name__ = reward.__qualname__ = name
    return reward


def human_group_reward(
    env: ArenaEnv,
    run_id: str,
    *,
    timeout: float,
    poll: float = 2.0,
    value: Value = "score",
    missing: float = 0.0,
    name: str = "human_group_reward",
) -> Callable[..., Awaitable[list[float]]]:
    """``async def f(prompts, completions, states=None, **kwargs) -> list[float]``: each run of
    equal consecutive prompts is one group."""

    async def reward(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        states: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        messages = [prompt_messages(p) for p in prompts]
        ids: list[str] = []
        for span in group_spans(messages):
            submission = await asyncio.to_thread(
                env.submit,
                run_id,
                messages[span.start],
                [completion_text(completions[i]) for i in span],
            )
            ids.extend(submission.completion_ids)
        records = await asyncio.to_thread(env.wait, run_id, ids, timeout, poll)
        scores: list[float] = []
        for i, cid in enumerate(ids):
            record = records.get(cid)
            if states is not None:
                _record_state(states[i], record)
            score = reward_value(record, value=value)
            scores.append(missing if score is None else score)
        return scores

    reward.__name__ = reward.__qualname__ = name
    return reward
