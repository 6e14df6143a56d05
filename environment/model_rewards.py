"""Model rewards: a run's records scored by a reward model at once, superseded by visitors'.

The reward model is the rating side's (``ratings.reward_model``; the arena never imports
ratings). This module is the seam it plugs into:

- ``model_rewards_register`` (called in ``RatingsConfig.ready``) installs the check that says
  whether the reward model can run here; ``model_rewards_unavailable`` asks it. With nothing
  registered, or with the registered check's reason, a run asking for ``reward_model`` is
  refused (409 naming the field) and nothing is created.
- After a submission of such a run commits, ``arena.signals.env_submission_created`` is sent;
  the rating side computes each completion's reward and interval and stores them with
  ``env_model_rewards_store``.

Supersession: a record's ``score``/``score_low``/``score_high`` are the humans' as soon as the
humans' fit gives one (``source: "human"``, ``environment.rewards.env_rewards_store``), else the
model's (``source: "model"``), else null (``source`` null). The model's own reward is kept apart
(``model_score*``) so a later refit of the humans' never loses it, and its interval's width
orders the run's pending completions for visitors (``environment.serve``). Every change of a
record takes the next number of its run's feed, under the run's row lock, as every other write
of a record does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import transaction

from arena.errors import ArenaError, ErrorCode
from environment.models import EnvCompletion, EnvRun
from environment.webhook import webhook_enqueue

_unavailable: Callable[[], str | None] | None = None
NOT_INSTALLED = "no reward model is installed in this arena"


def model_rewards_register(unavailable: Callable[[], str | None]) -> None:
    """Install the check of whether the reward model can run (None) or why not (a reason)."""
    global _unavailable
    _unavailable = unavailable


def model_rewards_unavailable() -> str | None:
    """Why a run cannot have model rewards here, or None when it can."""
    return NOT_INSTALLED if _unavailable is None else _unavailable()


def model_rewards_check() -> None:
    """A 409 naming ``reward_model`` unless the reward model can run."""
    reason = model_rewards_unavailable()
    if reason is not None:
        raise ArenaError(
            ErrorCode.REWARD_MODEL_UNAVAILABLE,
            f"reward_model is unavailable on this arena: {reason}. Create the run without it "
            "(its rewards then come from visitors' votes only).",
            status=409,
            field="reward_model",
        )


@dataclass(frozen=True)
class ModelReward:
    """A completion's reward as the reward model computed it (Elo scale, 0 = group mean)."""

    completion_id: uuid.UUID
    score: float
    score_low: float
    score_high: float


def env_model_rewards_store(
    *, submission_id: uuid.UUID, rewards: Sequence[ModelReward], snapshot_id: int
) -> int:
    """Store the model's rewards of a group; returns how many records changed in the feed.

    A record without the humans' score shows the model's (``source: "model"``) with a new
    number; one the humans already scored keeps theirs (the model's is kept apart, no new
    number). A rerun with the same rewards changes nothing.
    """
    by_id = {r.completion_id: r for r in rewards}
    with transaction.atomic():
        run_id = (
            EnvCompletion.objects.filter(submission_id=submission_id)
            .values_list("run_id", flat=True)
            .first()
        )
        if run_id is None:
            return 0
        run = EnvRun.objects.select_for_update().get(pk=run_id)
        shown: list[EnvCompletion] = []
        kept: list[EnvCompletion] = []
        for completion in EnvCompletion.objects.filter(submission_id=submission_id).order_by(
            "index"
        ):
            reward = by_id.get(completion.pk)
            if reward is None:
                continue
            values = (reward.score, reward.score_low, reward.score_high)
            if (
                completion.model_score,
                completion.model_score_low,
                completion.model_score_high,
            ) == values and completion.model_snapshot_id == snapshot_id:
                continue
            (
                completion.model_score,
                completion.model_score_low,
                completion.model_score_high,
            ) = values
            completion.model_snapshot_id = snapshot_id
            if completion.source == EnvCompletion.Source.HUMAN:
                kept.append(completion)
                continue
            completion.source = EnvCompletion.Source.MODEL
            completion.score, completion.score_low, completion.score_high = values
            shown.append(completion)
        model_fields = ["model_score", "model_score_low", "model_score_high", "model_snapshot_id"]
        if kept:
            EnvCompletion.objects.bulk_update(kept, model_fields)
        if shown:
            for completion in shown:
                run.reward_seq += 1
                completion.seq = run.reward_seq
            EnvCompletion.objects.bulk_update(
                shown, [*model_fields, "source", "score", "score_low", "score_high", "seq"]
            )
            run.save(update_fields=["reward_seq"])
            if run.webhook_url:
                webhook_enqueue(run_id=run.pk)
    return len(shown)
