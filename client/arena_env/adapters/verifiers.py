"""The arena's visitors as a verifiers reward: 0.1.x rubrics and 0.4's ``verifiers.v1`` stack.

verifiers 0.1.x (and 0.2.x) have a ``Rubric`` that calls an individual reward function once
per rollout, concurrently for the rollouts of a group, passing the arguments it names
(``prompt``, ``completion``, ``answer``, ``state``, ``task``, ``info``...); a group reward
function gets the plural (``prompts``, ``completions``...) and returns one score per rollout.
From 0.2 on, messages are objects (pydantic models), read here like role/content dicts.

verifiers 0.4 has no ``Rubric``. A rollout is a ``Trace``; it is scored by its task's
``@vf.reward`` methods and by the functions plugged into ``TaskConfig.rewards``
(``{"name": {"fn": "module:function"}}``), each an ``async`` callable invoked with only the
names it declares out of ``task`` (the ``TaskData``: ``prompt``, ``system_prompt``...),
``trace`` (the ``Trace``: ``assistant_messages``, ``rewards``, ``info``...) and ``runtime``,
once per trace; what it returns is recorded with ``trace.record_reward(name, value,
weight)``. Rollouts of one task (``-r n``) are independent episodes; judgement across
rollouts is an ``Env``'s ``finalize(task, episode)`` over the episode's traces.

``human_reward`` builds a reward function for both shapes: called with ``trace`` (0.4) it
reads the prompt from the task and the completion from the trace's assistant messages;
called with ``prompt`` and ``completion`` (0.1.x) it reads those. Calls with the same prompt
that arrive within ``window`` seconds of each other are submitted together as one group (at
once when ``group_size`` have arrived), so the visitors compare them with each other.
``human_group_reward`` is the 0.1.x group reward function. ``human_group_env`` builds a 0.4
``Env`` whose episode is ``n`` attempts at a task, submitted together as one group in its
``finalize``: the grouping no longer depends on timing.

A completion not judged within ``timeout``, or a blank one (the arena refuses blanks: it is
left out of its group), scores ``missing``. A refused submission or a failed call is never a
score: it is logged at ERROR on this module's logger, recorded (``state["arena_error"]``,
``trace.info["arena_error"]``) and raised. verifiers 0.4 records an exception from scoring
on the trace (a ``TaskError``, ``trace.ok`` false, the reward left ``None``) but
``trace.reward`` then sums to 0.0, so read rewards through ``trace_rewards``, which raises
instead. 0.1/0.2 rubrics catch a reward function's exception and score 0.0: there the log
line and the state entry are what the user sees.

verifiers is imported only inside ``human_group_env``: the client stays standard-library only.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from arena_env.adapters.trl import (
    Value,
    group_spans,
    reward_value,
    submit_group,
    wait_for_group,
)
from arena_env.client import (
    MAX_GROUP,
    ArenaEnv,
    Prompt,
    Reward,
    completion_text,
    prompt_messages,
)

__all__ = [
    "ArenaScoringError",
    "human_group_env",
    "human_group_reward",
    "human_reward",
    "task_prompt",
    "trace_completion",
    "trace_rewards",
]

logger = logging.getLogger(__name__)


class ArenaScoringError(RuntimeError):
    """Rollouts whose arena reward is missing because scoring failed, with each error."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__(
            f"{len(errors)} rollout(s) not scored by the arena: " + "; ".join(errors[:5])
        )
        self.errors = list(errors)


# --- reading verifiers 0.4's objects (duck-typed: verifiers is not imported) ---------------
def task_prompt(task: Any) -> Prompt:
    """A 0.4 ``TaskData``'s prompt as the arena takes it: its ``system_prompt`` (when set)
    and its ``prompt`` (a string or message objects) as role/content messages."""
    prompt = getattr(task, "prompt", None)
    system = getattr(task, "system_prompt", None)
    if prompt is None:
        raise ValueError("The task has no prompt: nothing to show the arena's visitors")
    messages = prompt_messages(prompt)
    if not system:
        return messages
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if any(m["role"] == "system" for m in messages):
        return messages
    return [{"role": "system", "content": str(system)}, *messages]


def trace_completion(trace: Any) -> str:
    """A 0.4 ``Trace``'s completion: the text of the model's own (sampled) messages."""
    return completion_text(list(getattr(trace, "assistant_messages", None) or []))


def trace_rewards(items: Iterable[Any], *, name: str = "human_reward") -> list[float]:
    """Each trace's total reward (``trace.reward``), in order; ``items`` are traces or
    episodes (their traces, in order). Raises ``ArenaScoringError`` when any trace lacks the
    reward ``name`` (its scoring failed, or the episode's ``finalize`` did) instead of
    reading it as 0.0."""
    traces: list[Any] = []
    errors: list[str] = []
    for item in items:
        if hasattr(item, "traces") and not hasattr(item, "assistant_messages"):  # an episode
            if getattr(item, "errors", None) and not getattr(item, "ok", True):
                errors.extend(f"episode {item.id}: {e.message}" for e in item.errors)
            traces.extend(item.traces)
        else:
            traces.append(item)
    for trace in traces:
        if (getattr(trace, "rewards", None) or {}).get(name) is None:
            arena_error = (getattr(trace, "info", None) or {}).get("arena_error")
            recorded = [e.message for e in getattr(trace, "errors", None) or []]
            detail = arena_error or "; ".join(recorded) or f"no {name!r} reward recorded"
            errors.append(f"trace {getattr(trace, 'id', '?')}: {detail}")
    if errors:
        raise ArenaScoringError(list(dict.fromkeys(errors)))
    return [float(t.reward) for t in traces]


# --- grouping concurrent calls -------------------------------------------------------------
@dataclass
class _Batch:
    prompt: Prompt
    texts: list[str] = field(default_factory=list)
    futures: list[asyncio.Future[Reward | None]] = field(default_factory=list)
    flushing: bool = False


PendingKey = tuple[asyncio.AbstractEventLoop, str]


def _prompt_key(prompt: Prompt) -> str:
    return json.dumps(prompt, sort_keys=True, default=str)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class _Grouper:
    """Gathers concurrent single-completion calls into groups per prompt and event loop."""

    def __init__(
        self,
        env: ArenaEnv,
        run_id: str,
        *,
        timeout: float,
        group_size: int,
        window: float,
        poll: float,
    ) -> None:
        self.env, self.run_id = env, run_id
        self.timeout, self.group_size, self.window, self.poll = timeout, group_size, window, poll
        self.pending: dict[PendingKey, _Batch] = {}
        self.background: set[asyncio.Task[None]] = set()  # strong references until done

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def judge(self, prompt: Prompt, text: str) -> Reward | None:
        loop = asyncio.get_running_loop()
        key = (loop, _prompt_key(prompt))
        future: asyncio.Future[Reward | None] = loop.create_future()
        batch = self.pending.get(key)
        if batch is None:
            batch = self.pending[key] = _Batch(prompt=prompt)
            self._spawn(self._flush_later(key, batch))
        batch.texts.append(text)
        batch.futures.append(future)
        if len(batch.texts) >= self.group_size:
            # Full: the next call with this prompt starts a new group, even before this
            # group's flush has begun.
            del self.pending[key]
            self._spawn(self._flush(key, batch))
        return await future

    async def _flush(self, key: PendingKey, batch: _Batch) -> None:
        if batch.flushing:
            return
        batch.flushing = True
        if self.pending.get(key) is batch:
            del self.pending[key]
        try:
            ids = await asyncio.to_thread(
                submit_group, self.env, self.run_id, batch.prompt, batch.texts
            )
            records = await asyncio.to_thread(
                wait_for_group, self.env, self.run_id, ids, timeout=self.timeout, poll=self.poll
            )
        except Exception as error:  # every waiting caller sees the failure
            for future in batch.futures:
                if not future.done():
                    future.set_exception(error)
            return
        for future, cid in zip(batch.futures, ids, strict=True):
            if not future.done():
                future.set_result(None if cid is None else records.get(cid))

    async def _flush_later(self, key: PendingKey, batch: _Batch) -> None:
        try:
            await asyncio.sleep(self.window)
        except asyncio.CancelledError:  # the loop is closing: no call may join this group
            if self.pending.get(key) is batch:
                del self.pending[key]
            for future in batch.futures:
                future.cancel()
            raise
        await self._flush(key, batch)


def _mark_reward(fn: Callable[..., Any], *, weight: float) -> None:
    # The attributes ``@vf.reward`` sets in 0.4 (its discovery reads them); harmless for
    # 0.1.x, which reads none of them.
    fn.reward = True  # type: ignore[attr-defined]
    fn.reward_priority = 0  # type: ignore[attr-defined]
    fn._vf_weight = weight  # type: ignore[attr-defined]


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
    weight: float = 1.0,
) -> Callable[..., Awaitable[float]]:
    """``async def f(prompt=None, completion=None, answer=None, state=None, task=None,
    trace=None, **kwargs) -> float``: a 0.1.x rubric's reward function, and a 0.4 reward.

    With 0.4, plug it by name (``TaskConfig(rewards={name: {"fn": "module:attr"}})``), call
    it from a ``@vf.reward`` method (``return await f(task=task, trace=trace)``), or build the
    episode-level grouping with ``human_group_env``. Set ``group_size`` to the rollouts per
    task (``-r n``) and ``window`` above the time between the first and last of them reaching
    scoring: a group is sent as soon as it is full, or ``window`` seconds after its first call.
    """
    if not 1 <= group_size <= MAX_GROUP:
        raise ValueError(f"group_size is between 1 and {MAX_GROUP}")
    grouper = _Grouper(
        env, run_id, timeout=timeout, group_size=group_size, window=window, poll=poll
    )

    async def reward(
        prompt: Any = None,
        completion: Any = None,
        answer: Any = None,
        state: Any = None,
        task: Any = None,
        trace: Any = None,
        **kwargs: Any,
    ) -> float:
        if trace is not None:  # verifiers 0.4: the task's data and the rollout's trace
            messages = task_prompt(task if task is not None else trace.task.data)
            text = trace_completion(trace)
            store = trace.info
        elif prompt is not None and completion is not None:
            messages = prompt_messages(prompt)
            text = completion_text(completion)
            store = state if isinstance(state, dict) else None
        else:
            raise TypeError(
                f"{name} takes prompt and completion (verifiers 0.1.x) or task and trace "
                "(verifiers 0.4)"
            )
        try:
            record = await grouper.judge(messages, text)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.error("arena reward %s failed for run %s: %s", name, run_id, _describe(error))
            if store is not None:
                store["arena_error"] = _describe(error)
            raise
        score = reward_value(record, value=value)
        if store is not None:
            store["arena_reward"] = None if record is None else asdict(record)
        if trace is not None:
            trace.record_metric(f"{name}_judged", float(score is not None))
        return missing if score is None else score

    reward.__name__ = reward.__qualname__ = name
    _mark_reward(reward, weight=weight)
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
    """``async def f(prompts, completions, states=None, **kwargs) -> list[float]`` (0.1.x):
    each run of equal consecutive prompts is one group."""

    async def reward(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        states: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        messages = [prompt_messages(p) for p in prompts]
        try:
            ids: list[str | None] = []
            for span in group_spans(messages):
                ids.extend(
                    await asyncio.to_thread(
                        submit_group,
                        env,
                        run_id,
                        messages[span.start],
                        [completion_text(completions[i]) for i in span],
                    )
                )
            records = await asyncio.to_thread(
                wait_for_group, env, run_id, ids, timeout=timeout, poll=poll
            )
        except Exception as error:
            logger.error("arena reward %s failed for run %s: %s", name, run_id, _describe(error))
            for state in states or ():
                if isinstance(state, dict):
                    state["arena_error"] = _describe(error)
            raise
        scores: list[float] = []
        for i, cid in enumerate(ids):
            record = None if cid is None else records.get(cid)
            if states is not None and isinstance(states[i], dict):
                states[i]["arena_reward"] = None if record is None else asdict(record)
            score = reward_value(record, value=value)
            scores.append(missing if score is None else score)
        return scores

    reward.__name__ = reward.__qualname__ = name
    return reward


# --- verifiers 0.4: one episode, one arena group ---------------------------------------------
async def _score_episode(
    env: ArenaEnv,
    run_id: str,
    task: Any,
    traces: Sequence[Any],
    *,
    timeout: float,
    poll: float,
    value: Value,
    missing: float,
    name: str,
    weight: float,
) -> None:
    """Submit the episode's finished traces as one group and record each one's reward."""
    scored = [t for t in traces if getattr(t, "ok", True)]  # a failed run has no completion
    if not scored:
        return
    prompt = task_prompt(task.data)
    try:
        ids: list[str | None] = []
        for span in group_spans([prompt] * len(scored)):  # parts of at most 16
            ids.extend(
                await asyncio.to_thread(
                    submit_group,
                    env,
                    run_id,
                    prompt,
                    [trace_completion(scored[i]) for i in span],
                    [{"trace": scored[i].id} for i in span],
                )
            )
        records = await asyncio.to_thread(
            wait_for_group, env, run_id, ids, timeout=timeout, poll=poll
        )
    except Exception as error:
        logger.error("arena group reward %s failed for run %s: %s", name, run_id, _describe(error))
        for trace in scored:
            trace.info["arena_error"] = _describe(error)
        raise
    for trace, cid in zip(scored, ids, strict=True):
        record = None if cid is None else records.get(cid)
        score = reward_value(record, value=value)
        trace.info["arena_reward"] = None if record is None else asdict(record)
        trace.record_metric(f"{name}_judged", float(score is not None))
        trace.record_reward(name, missing if score is None else score, weight)


def human_group_env(
    env: ArenaEnv,
    run_id: str,
    *,
    timeout: float,
    n: int = 4,
    poll: float = 2.0,
    value: Value = "score",
    missing: float = 0.0,
    name: str = "human_reward",
    weight: float = 1.0,
) -> type[Any]:
    """A verifiers 0.4 ``Env`` class: an episode is ``n`` attempts at the task by its
    ``agent`` seat (like 0.4's ``best-of-n``), and its ``finalize`` submits the finished
    attempts as one arena group, recording each one's score as the reward ``name``.

    Build it with its config, ``Env(Env.Config(taskset={"id": ...}, n=...))`` (``Env.Config``
    is the ``EnvConfig`` subclass with the ``agent`` seat and ``n``), and run it as any 0.4
    env (``env.serving()``, ``env.slots(task)``, ``env.run_slot(slot, ctx)``). A refused
    submission fails the episode (``episode.errors``, ``episode.ok`` false, the reward not
    recorded); ``trace_rewards(episodes)`` raises on it.
    """
    if not 1 <= n <= MAX_GROUP:
        raise ValueError(f"n is between 1 and {MAX_GROUP}")
    import verifiers.v1 as vf
    from pydantic import Field

    default_n = n  # a class body assigning ``n`` cannot read the enclosing ``n``

    class HumanGroupEnvConfig(vf.EnvConfig):  # type: ignore[misc]
        agent: vf.AgentConfig = vf.AgentConfig()
        n: int = Field(default_n, ge=1, le=MAX_GROUP)
        """Attempts per episode, submitted together as one arena group."""

    class HumanGroupEnv(vf.Env[HumanGroupEnvConfig]):  # type: ignore[misc]
        Config = HumanGroupEnvConfig

        async def run(self, task: Any, agents: Any) -> None:
            async with asyncio.TaskGroup() as attempts:
                for _ in range(self.config.n):
                    attempts.create_task(agents.agent.run(task))

        async def finalize(self, task: Any, episode: Any) -> None:
            await _score_episode(
                env,
                run_id,
                task,
                episode.traces,
                timeout=timeout,
                poll=poll,
                value=value,
                missing=missing,
                name=name,
                weight=weight,
            )

    return HumanGroupEnv
