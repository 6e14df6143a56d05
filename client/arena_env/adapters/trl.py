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

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from arena_env.client import (
    MAX_GROUP,
    ArenaEnv,
    ArenaEnvError,
    Reward,
    completion_text,
    prompt_messages,
)

__all__ = [
    "RewardFunc",
    "cancel_unfinished",
    "group_spans",
    "human_reward",
    "reward_value",
    "submit_group",
    "wait_for_group",
]

logger = logging.getLogger(__name__)

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


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with each NUL and lone surrogate replaced by U+FFFD, as the arena stores text."""
    return _UNSTORABLE.sub("\ufffd", text)


def submit_group(
    env: ArenaEnv,
    run_id: str,
    prompt: Any,
    texts: Sequence[str],
    meta: Sequence[Mapping[str, Any] | None] | None = None,
) -> list[str | None]:
    """Submit one group's texts; the completion id of each, in order, ``None`` for a blank one.

    The arena refuses a blank completion (nothing to show a visitor) and a small policy emits
    them now and then: they are left out of the submission rather than failing the whole
    group, and their reward is whatever the adapter gives an unjudged completion. A group of
    blanks only is not sent at all.
    """
    texts = [storable_text(text) for text in texts]
    keep = [i for i, text in enumerate(texts) if text.strip()]
    ids: list[str | None] = [None] * len(texts)
    if not keep:
        return ids
    submission = env.submit(
        run_id,
        prompt_messages(prompt),
        [texts[i] for i in keep],
        meta=None if meta is None else [meta[i] for i in keep],
    )
    if len(submission.completion_ids) != len(keep):
        raise ArenaEnvError(
            0,
            "bad_response",
            f"{len(submission.completion_ids)} ids for {len(keep)} completions",
        )
    for i, cid in zip(keep, submission.completion_ids, strict=True):
        ids[i] = cid
    return ids


def cancel_unfinished(
    env: ArenaEnv, run_id: str, records: Mapping[str, Reward], ids: Sequence[str | None]
) -> list[str]:
    """Cancel the submissions of ``ids`` still waiting for votes once the trainer has stopped
    waiting: no visitor is then asked to judge completions whose rewards would come too late
    to be used, nor do they count toward the run's pending bound. Completions already
    judged keep their records. Best effort: a cancel that fails is logged, not raised (the
    rewards in hand are still good). Returns the submission ids cancelled."""
    late = {
        record.submission_id
        for cid in ids
        if cid is not None and (record := records.get(cid)) is not None and not record.done
    }
    cancelled: list[str] = []
    for sid in sorted(late):
        try:
            if env.cancel_submission(run_id, sid):
                cancelled.append(sid)
        except ArenaEnvError as error:
            logger.warning("could not cancel late submission %s of run %s: %s", sid, run_id, error)
    return cancelled


def wait_for_group(
    env: ArenaEnv,
    run_id: str,
    ids: Sequence[str | None],
    *,
    timeout: float,
    poll: float,
    cancel_late: bool = True,
) -> dict[str, Reward]:
    """The records of a group's submitted members (``None`` ids were not sent) once all are
    done or ``timeout`` has passed; then, with ``cancel_late``, ``cancel_unfinished``."""
    submitted = [cid for cid in ids if cid is not None]
    if not submitted:
        return {}
    records = env.wait(run_id, submitted, timeout=timeout, poll=poll)
    if cancel_late:
        cancel_unfinished(env, run_id, records, submitted)
    return records


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
    cancel_late: bool = True,
    name: str = "human_reward",
) -> RewardFunc:
    """A TRL-style reward function scoring completions by the arena's visitors.

    ``timeout`` bounds each call's wait for votes (seconds). ``group_size`` is the trainer's
    ``num_generations`` when consecutive groups may share a prompt; without it, equal
    consecutive prompts form one group (with several processes, a process may hold part of a
    group: the part is then submitted as a smaller group, so leave ``group_size`` unset there).
    Each completion's ``meta`` holds its position in the batch and the trainer's step (when the
    trainer passes ``trainer_state``). The call blocks until every completion is done or the
    timeout passes; then, with ``cancel_late``, the submissions still waiting are cancelled
    (``cancel_unfinished``), since the trainer has moved on without their rewards.
    """

    def reward(
        prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        step = _step(kwargs)
        ids: list[str | None] = []
        for span in group_spans(prompts, group_size):
            metas = [{"index": i} | ({"step": step} if step is not None else {}) for i in span]
            ids.extend(
                submit_group(
                    env,
                    run_id,
                    prompts[span.start],
                    [completion_text(completions[i]) for i in span],
                    metas,
                )
            )
        records = wait_for_group(
            env, run_id, ids, timeout=timeout, poll=poll, cancel_late=cancel_late
        )
        return [
            None
            if cid is None
            else reward_value(records.get(cid), value=value, require_complete=require_complete)
            for cid in ids
        ]

    # TRL names each reward function's logged column after ``__name__``.
    reward.__name__ = reward.__qualname__ = name
    return reward
