"""A reward function in the shape TRL's ``GRPOTrainer`` calls: ``f(prompts, completions,
**kwargs) -> list[float | None]``.

The trainer passes one flat batch in which each prompt's ``num_generations`` completions sit
next to each other; each run of equal prompts is submitted as one group (so visitors compare
the group's members against each other), then the function waits up to ``timeout`` for the
votes. A completion without a finished judgment gets ``None``, which the trainer turns into
NaN and leaves out of its sum over reward functions. Conversational batches (prompts and
completions as role/content messages) are read as such. TRL is not imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from arena_env.client import (
    MAX_GROUP,
    ArenaEnv,
    Reward,
    completion_text,
    prompt_messages,
)

__all__ = ["RewardFunc", "group_spans", "human_reward", "reward_value"]

RewardFunc = Callable[..., list[float | None]]
Value = Literal["score", "win_rate"]


def group_spans(prompts: Sequence[Any], group_size: int | None = None) -> list[range]:
    """The positions of each group in a flat batch.

    With ``group_size`` the batch is cut into consecutive groups of that size (each must share
    one prompt); without it, each run of equal consecutive prompts is a group. A group larger
    than the API's 16 is split into parts of at most 16.
    """
    spans: list[range] = []
    if group_size is not None:
        if group_size < 1 or len(prompts) % group_size:
            raise ValueError(f"{len(prompts)} prompts cannot be cut into groups of {group_size}")
        for start in range(0, len(prompts), group_size):
            span = range(start, start + group_size)
            if any(prompts[i] != prompts[start] for i in span):
                raise ValueError(f"The group at {start} mixes prompts (group_size={group_size})")
            spans.append(span)
    else:
        start = 0
        for i in range(1, len(prompts) + 1):
            if i == len(prompts) or prompts[i] != prompts[start]:
                spans.append(range(start, i))
                start = i
    return [part for span in spans for part in _split(span)]


def _split(span: range) -> list[range]:
    return [
        range(start, min(start + MAX_GROUP, span.stop))
        for start in range(span.start, span.stop, MAX_GROUP)
    ]


def reward_value(
    reward: Reward | None, *, value: Value = "score", require_complete: bool = True
) -> float | None:
    """The number a trainer gets from a record: its score (or win rate) once complete, and
    ``None`` before that; with ``require_complete=False``, whatever the votes so far give."""
    if reward is None or (require_complete and not reward.complete):
        return None
    return reward.score if value == "score" else reward.win_rate


def _step(kwargs: Mapping[str, Any]) -> int | None:
    state = kwargs.get("trainer_state")
    step = getattr(state, "global_step", None)
    return step if isinstance(step, int) else None


def human_reward(
    env: ArenaEnv,
    run_id: str,
    *,
    timeout: float,
    group_size: int | None = None,
    poll: float = 2.0,
    value: Value = "score",
    require_complete: bool = True,
    name: str = "human_reward",
) -> RewardFunc:
    """A TRL-style reward function scoring completions by the arena's visitors.

    ``timeout`` bounds each call's wait for votes (seconds). ``group_size`` is the trainer's
    ``num_generations`` when consecutive groups may share a prompt; without it, equal
    consecutive prompts form one group (with several processes, a process may hold part of a
    group: the part is then submitted as a smaller group, so leave ``group_size`` unset there).
    Each completion's ``meta`` holds its position in the batch and the trainer's step (when the
    trainer passes ``trainer_state``). The call blocks until every completion is done or the
    timeout passes.
    """

    def reward(
        prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        step = _step(kwargs)
        ids: list[str] = []
        for span in group_spans(prompts, group_size):
            metas = [{"index": i} | ({"step": step} if step is not None else {}) for i in span]
            submission = env.submit(
                run_id,
                prompt_messages(prompts[span.start]),
                [completion_text(completions[i]) for i in span],
                meta=metas,
            )
            ids.extend(submission.completion_ids)
        records = env.wait(run_id, ids, timeout=timeout, poll=poll)
        return [
            reward_value(records.get(cid), value=value, require_complete=require_complete)
            for cid in ids
        ]

    # TRL names each reward function's logged column after ``__name__``.
    reward.__name__ = reward.__qualname__ = name
    return reward
