"""The reward model's Django side: training pairs from the votes, fitted snapshots, and a run's
model rewards.

Training pairs: every unflagged vote (the newest ``ARENA_REWARD_MODEL_MAX_VOTES``) whose battle
has both answers: each side's prompt is its user turns and its answer its assistant turns (the
saved messages, superseded ones left out), joined; its style the sum of its turns' counts.
Outcomes as the ratings count them: a win 1, a loss 0, a tie and "both bad" each 0.5.

A refit (``reward_model_refit``) embeds those texts, standardises the features on the answers it
read, chooses the penalty by held-out log-loss over 3 folds split by prompt, fits the head on
every pair and stores an immutable ``RewardModelSnapshot`` with the held-out figures of 5
folds split by prompt. On the same votes as the latest snapshot (the same newest vote and number
of pairs) it is a no-op.

Scoring (``reward_model_score_submission``) reads the latest snapshot (fitting the first one if
there is none: on no votes it is the prior, ``w = 0``, whose intervals say it knows nothing),
computes each completion's reward and interval within its group (``estimator.group_rewards``)
and stores them (``environment.model_rewards.env_model_rewards_store``).

The embedder is looked up in ``ratings.reward_model.embedding`` at call time, so tests replace
it (and ``unavailable_reason``) with a fake and run everything without torch.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings

from answer_style import style_counts
from arena.models import BattleMessage, Vote
from environment.model_rewards import ModelReward, env_model_rewards_store
from environment.models import EnvCompletion, EnvSubmission
from ratings.models import RewardModelSnapshot
from ratings.reward_model import embedding
from ratings.reward_model.estimator import (
    BTHead,
    FloatArray,
    fit_bt_head,
    fold_of_groups,
    group_rewards,
    log_loss,
    prior_head,
    select_l2,
    win_probability,
)
from ratings.reward_model.features import (
    FeatureSpec,
    fitted_spec,
    raw_features,
    standardised,
    style_matrix,
    style_vector,
)

logger = logging.getLogger(__name__)

OUTCOME = {
    Vote.Winner.MODEL_A: 1.0,
    Vote.Winner.MODEL_B: 0.0,
    Vote.Winner.TIE: 0.5,
    Vote.Winner.BOTH_BAD: 0.5,
}
HELDOUT_FOLDS = 5
PRIOR_L2 = 1.0  # the prior's precision per weight, on standardised features, before any vote
_DIGITS = 6  # rewards are rounded, so a rerun on the same snapshot stores the same numbers


def reward_model_unavailable() -> str | None:
    """Why model rewards cannot run here (the setting off, or the extra missing), or None."""
    if not settings.ARENA_REWARD_MODEL:
        return "the setting ARENA_REWARD_MODEL is off"
    return embedding.unavailable_reason()


def base_spec() -> FeatureSpec:
    return FeatureSpec(
        embedding=embedding.MODEL_NAME, embedding_dim=embedding.EMBEDDING_DIM, style=True
    )


@dataclass(frozen=True)
class TrainingSet:
    """Answers (``prompts``, ``answers``, ``styles`` (m, 4)) and the pairs between them:
    ``a``, ``b`` answer indices, ``y`` outcomes, ``groups`` the battles' prompt ids."""

    prompts: list[str]
    answers: list[str]
    styles: FloatArray
    a: np.ndarray
    b: np.ndarray
    y: FloatArray
    groups: list[str]
    high_water: int


def _eligible_votes() -> Any:
    return Vote.objects.filter(flagged=False)


def training_set(*, limit: int | None = None) -> TrainingSet:
    """The newest ``limit`` (``ARENA_REWARD_MODEL_MAX_VOTES``) unflagged votes as pairs."""
    limit = limit or settings.ARENA_REWARD_MODEL_MAX_VOTES
    votes = list(
        _eligible_votes()
        .order_by("-id")
        .values_list("id", "winner", "battle_id", "battle__prompt_id")[:limit]
    )
    sides: dict[tuple[Any, str], list[tuple[int, str, str, Any]]] = {}
    for battle_id, side, turn, user, content, style in BattleMessage.objects.filter(
        battle_id__in=[v[2] for v in votes], superseded_at__isnull=True
    ).values_list("battle_id", "side", "turn", "user_content", "content", "style"):
        sides.setdefault((battle_id, side), []).append((turn, user, content, style))
    prompts: list[str] = []
    answers: list[str] = []
    styles: list[list[float]] = []

    def answer(battle_id: Any, side: str) -> int | None:
        turns = sorted(sides.get((battle_id, side), []), key=lambda t: t[0])
        if not turns or not any(content for _, _, content, _ in turns):
            return None
        prompts.append("\n\n".join(user for _, user, _, _ in turns))
        answers.append("\n\n".join(content for _, _, content, _ in turns))
        styles.append(
            style_vector(
                [style if style is not None else style_counts(c) for _, _, c, style in turns]
            )
        )
        return len(answers) - 1

    a, b, y, groups = [], [], [], []
    for _vote_id, winner, battle_id, prompt_id in reversed(votes):
        first, second = answer(battle_id, "a"), answer(battle_id, "b")
        if first is None or second is None or winner not in OUTCOME:
            continue
        a.append(first)
        b.append(second)
        y.append(OUTCOME[winner])
        groups.append(str(prompt_id))
    return TrainingSet(
        prompts=prompts,
        answers=answers,
        styles=np.array(styles, dtype=np.float64).reshape(-1, 4),
        a=np.array(a, dtype=np.int64),
        b=np.array(b, dtype=np.int64),
        y=np.array(y, dtype=np.float64),
        groups=groups,
        high_water=max((v[0] for v in votes), default=0),
    )


def _features(
    spec: FeatureSpec, prompts: Sequence[str], answers: Sequence[str], styles: FloatArray
) -> FloatArray:
    """Raw features of answers (the embedder is called once for prompts and answers)."""
    if not spec.embedding:
        return raw_features(spec, styles=styles)
    unique = list(dict.fromkeys([*prompts, *answers]))
    vectors = embedding.embed(unique)
    vectors = vectors.reshape(len(unique), spec.embedding_dim)
    row = {text: i for i, text in enumerate(unique)}
    return raw_features(
        spec,
        answer_embeddings=vectors[np.array([row[t] for t in answers], dtype=np.int64)],
        prompt_embeddings=vectors[np.array([row[t] for t in prompts], dtype=np.int64)],
        styles=styles,
    )


def _heldout(
    diffs: FloatArray, y: FloatArray, groups: list[str], l2_per_pair: float
) -> dict[str, Any]:
    """Figures of ``HELDOUT_FOLDS`` folds split by prompt (null without enough prompts)."""
    empty = {
        "folds": HELDOUT_FOLDS,
        "pairs": len(y),
        "accuracy": None,
        "log_loss": None,
        "brier": None,
    }
    if len(set(groups)) < HELDOUT_FOLDS:
        return empty
    folds = fold_of_groups(groups, HELDOUT_FOLDS)
    p = np.empty(len(y))
    for fold in range(HELDOUT_FOLDS):
        train, test = folds != fold, folds == fold
        head = fit_bt_head(diffs[train], y[train], l2=l2_per_pair * int(train.sum()))
        p[test] = win_probability(head, diffs[test])
    decisive = y != 0.5
    right = np.where(p[decisive] == 0.5, 0.5, (p[decisive] > 0.5) == (y[decisive] == 1.0))
    return {
        **empty,
        "accuracy": round(float(right.mean()), 4) if decisive.any() else None,
        "log_loss": round(log_loss(p, y), 4),
        "brier": round(float(np.mean((p - y) ** 2)), 4),
    }


def _pack(head: BTHead) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.vstack([head.weights_[None, :], head.covariance_]).astype("<f8"))
    return buffer.getvalue()


def snapshot_head(snapshot: RewardModelSnapshot) -> tuple[BTHead, FeatureSpec]:
    """The stored head and feature spec of a snapshot."""
    matrix = np.load(io.BytesIO(bytes(snapshot.weights)), allow_pickle=False)
    head = BTHead(
        weights_=matrix[0],
        covariance_=matrix[1:],
        l2=snapshot.l2,
        n_pairs=snapshot.n_votes,
        iterations=0,
    )
    return head, FeatureSpec.from_json(snapshot.spec)


def reward_model_refit(*, force: bool = False) -> RewardModelSnapshot:
    """A new snapshot fitted on the votes, or the latest one when the votes are unchanged."""
    started = time.perf_counter()
    latest = RewardModelSnapshot.objects.first()
    data = training_set()  # the database's part only: the embedding comes after the check
    # The newest vote and the number of pairs: a new vote moves the first, a vote flagged or
    # cleared the second.
    if (
        latest is not None
        and not force
        and (latest.vote_high_water, latest.n_votes) == (data.high_water, len(data.y))
    ):
        return latest
    high_water = data.high_water
    spec = base_spec()
    raw = _features(spec, data.prompts, data.answers, data.styles)
    spec = fitted_spec(spec, raw)
    phi = standardised(spec, raw)
    if len(data.y):
        diffs = phi[data.a] - phi[data.b]
        l2 = select_l2(diffs, data.y, data.groups)
        head = fit_bt_head(diffs, data.y, l2=l2)
        heldout = _heldout(diffs, data.y, data.groups, l2 / len(data.y))
    else:
        l2 = PRIOR_L2
        head = prior_head(spec.dim, l2=l2)
        heldout = _heldout(np.zeros((0, spec.dim)), data.y, [], l2)
    snapshot = RewardModelSnapshot.objects.create(
        vote_high_water=high_water,
        n_votes=len(data.y),
        spec=spec.as_json(),
        l2=float(l2),
        weights=_pack(head),
        heldout=heldout,
        duration_seconds=time.perf_counter() - started,
    )
    logger.info(
        "reward model: snapshot %s on %d votes (held-out accuracy %s)",
        snapshot.pk,
        snapshot.n_votes,
        heldout.get("accuracy"),
    )
    return snapshot


def _final_user_message(messages: Any) -> str:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return ""


def reward_model_score_submission(*, submission_id: uuid.UUID) -> int:
    """Score one submission's completions with the latest snapshot and store the rewards;
    returns how many records changed in the feed (a rerun changes nothing)."""
    submission = EnvSubmission.objects.filter(pk=submission_id).first()
    if submission is None:
        return 0
    completions = list(
        EnvCompletion.objects.filter(submission=submission)
        .order_by("index")
        .only("pk", "text", "style")
    )
    if not completions:
        return 0
    snapshot = RewardModelSnapshot.objects.first() or reward_model_refit()
    head, spec = snapshot_head(snapshot)
    prompt = _final_user_message(submission.messages)
    texts = [c.text for c in completions]
    styles = style_matrix(
        [c.style if c.style is not None else style_counts(c.text) for c in completions]
    )
    phi = standardised(spec, _features(spec, [prompt] * len(texts), texts, styles))
    rewards = group_rewards(head, phi)
    return env_model_rewards_store(
        submission_id=submission.pk,
        rewards=[
            ModelReward(
                completion_id=c.pk,
                score=round(float(rewards.score[i]), _DIGITS),
                score_low=round(float(rewards.low[i]), _DIGITS),
                score_high=round(float(rewards.high[i]), _DIGITS),
            )
            for i, c in enumerate(completions)
        ],
        snapshot_id=snapshot.pk,
    )


def submissions_unscored(*, limit: int = 200) -> list[uuid.UUID]:
    """Pending submissions of open runs with ``reward_model`` that have a completion without a
    model reward (their enqueue was lost): for the periodic sweep."""
    return list(
        EnvSubmission.objects.filter(
            run__reward_model=True,
            run__state="open",
            completions__status=EnvCompletion.Status.PENDING,
            completions__model_score__isnull=True,
        )
        .distinct()
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
