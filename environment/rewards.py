"""Reward records after votes: how the rating side's fit of a group is stored.

The fit itself is the rating side's (``ratings.env_rewards``; the arena never imports ratings):
after a vote on an environment battle, ``env_rewards_update`` reads the group
(``environment.selectors.env_group``) and stores the records the fit returns.

Statuses: a record the trainer cancelled while pending (``env_submissions_cancel``) stays
``cancelled`` (no longer served; a late vote on a battle served before still counts in it);
otherwise it is ``complete`` once it has ``votes_per_completion`` counted votes,
otherwise ``expired`` once its submission's ``expires_at`` has passed (expired records are no
longer served; ``env_completions_expire`` runs periodically for groups no vote touches), otherwise
``pending``.

A record's ``source`` says whose ``score`` it shows: the humans' fit's once it gives one, which
supersedes a reward model's (``environment.model_rewards``), else the model's, else none.

Every change of a record takes the next number of its run's ``reward_seq`` under the run's row
lock, in the transaction that writes it, so a cursor over ``seq`` never skips or repeats a
change (see ``environment.selectors``); a record that did not change keeps its number and is not
delivered again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, OuterRef, Subquery
from django.utils import timezone

from arena.errors import not_found
from arena.models import Vote
from environment.models import EnvBattle, EnvCompletion, EnvRun, EnvSubmission
from environment.selectors import EnvGroup, env_group
from environment.webhook import webhook_enqueue

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewardUpdate:
    """A completion's record as the rating side computed it (status is decided here)."""

    completion_id: uuid.UUID
    votes: int
    wins: int
    losses: int
    ties: int
    both_bad: int
    score: float | None
    score_low: float | None
    score_high: float | None


def reward_status(
    *, votes: int, votes_per_completion: int, expires_at: datetime, now: datetime
) -> str:
    """``complete`` with enough votes, else ``expired`` past the submission's expiry, else
    ``pending``."""
    if votes >= votes_per_completion:
        return EnvCompletion.Status.COMPLETE
    if now >= expires_at:
        return EnvCompletion.Status.EXPIRED
    return EnvCompletion.Status.PENDING


_FIELDS = ("votes", "wins", "losses", "ties", "both_bad", "score", "score_low", "score_high")


def env_rewards_store(*, submission_id: uuid.UUID, records: Sequence[RewardUpdate]) -> int:
    """Write the group's new records; returns how many changed.

    Only records that changed are written, each with the next ``seq`` of the run, under the
    run's row lock; the webhook (if any) is queued after commit. A rerun with the same records
    changes nothing (the task is idempotent).
    """
    submission = EnvSubmission.objects.only("run_id", "expires_at").get(pk=submission_id)
    now = timezone.now()
    by_id = {r.completion_id: r for r in records}
    with transaction.atomic():
        run = EnvRun.objects.select_for_update().get(pk=submission.run_id)
        changed = []
        for completion in EnvCompletion.objects.filter(submission_id=submission_id).order_by(
            "index"
        ):
            record = by_id.get(completion.pk)
            values = {f: getattr(completion, f) for f in _FIELDS}
            values["source"] = completion.source
            if record is not None:
                values = {f: getattr(record, f) for f in _FIELDS}
                values["source"] = _source_of(completion, values)
            values["status"] = (
                EnvCompletion.Status.CANCELLED
                if completion.status == EnvCompletion.Status.CANCELLED
                else reward_status(
                    votes=int(values["votes"] or 0),
                    votes_per_completion=run.votes_per_completion,
                    expires_at=submission.expires_at,
                    now=now,
                )
            )
            if all(getattr(completion, f) == v for f, v in values.items()):
                continue
            for f, v in values.items():
                setattr(completion, f, v)
            changed.append(completion)
        _renumber(run, changed)
    return len(changed)


def _source_of(completion: EnvCompletion, values: dict[str, object]) -> str:
    """Whose score the record shows: the humans' once their fit gives one (it supersedes the
    model's), else the reward model's (``environment.model_rewards``), which ``values`` then
    carries, else none."""
    if values["score"] is not None:
        return EnvCompletion.Source.HUMAN
    if completion.model_score is not None:
        values["score"] = completion.model_score
        values["score_low"] = completion.model_score_low
        values["score_high"] = completion.model_score_high
        return EnvCompletion.Source.MODEL
    return EnvCompletion.Source.NONE


def _renumber(run: EnvRun, changed: list[EnvCompletion]) -> None:
    """Give each changed record the run's next number and save them (caller holds the lock)."""
    if not changed:
        return
    now = timezone.now()
    for completion in changed:
        run.reward_seq += 1
        completion.seq = run.reward_seq
        completion.updated_at = now  # bulk_update does not apply auto_now
    # The records' old numbers are all below the new ones, so the unique (run, seq) holds
    # whatever order the rows are written in.
    EnvCompletion.objects.bulk_update(changed, [*_FIELDS, "source", "status", "seq", "updated_at"])
    run.save(update_fields=["reward_seq"])
    if run.webhook_url:
        webhook_enqueue(run_id=run.pk)


def env_rewards_update(
    *, submission_id: uuid.UUID, fit: Callable[[EnvGroup], Sequence[RewardUpdate]]
) -> int:
    """Read the group, ``fit`` it, store the records: one refresh, under the submission's row
    lock, so two refreshes of one group run one after the other and the later one reads every
    vote the earlier one read (a stale fit never overwrites a newer one). Returns how many
    records changed."""
    with transaction.atomic():
        locked = EnvSubmission.objects.select_for_update().filter(pk=submission_id).first()
        if locked is None:
            return 0
        group = env_group(submission_id=submission_id)
        # What the serve counts as judged follows what the fit counts (the source bound may
        # take a vote back in as other sources vote, so both ways).
        battles = EnvBattle.objects.filter(submission_id=submission_id)
        battles.filter(pk__in=group.left_out, counted=True).update(counted=False)
        battles.exclude(pk__in=group.left_out).filter(counted=False).update(counted=True)
        return env_rewards_store(submission_id=submission_id, records=fit(group))


# How far back the sweep looks for groups whose refit was lost (votes come in well before).
SWEEP_LOOKBACK = timedelta(days=2)


def env_submissions_behind(*, limit: int = 500) -> list[uuid.UUID]:
    """Groups with a counted vote newer than their records' last change: a refit's enqueue was
    lost (or its task failed). For the periodic sweep; submissions that expired more than
    ``SWEEP_LOOKBACK`` ago are left alone."""
    last_vote = (
        Vote.objects.filter(battle__env__submission_id=OuterRef("pk"), flagged=False)
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    last_change = (
        EnvCompletion.objects.filter(submission_id=OuterRef("pk"))
        .order_by("-updated_at")
        .values("updated_at")[:1]
    )
    return list(
        EnvSubmission.objects.filter(expires_at__gt=timezone.now() - SWEEP_LOOKBACK)
        .annotate(last_vote=Subquery(last_vote), last_change=Subquery(last_change))
        .filter(last_vote__gt=F("last_change"))
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )


def env_completions_expire(*, now: datetime | None = None) -> int:
    """Mark pending records of expired submissions ``expired`` (each a change in the feed);
    returns how many. A rerun finds nothing more to do."""
    now = now or timezone.now()
    expired = 0
    run_ids: Iterable[uuid.UUID] = (
        EnvCompletion.objects.filter(
            status=EnvCompletion.Status.PENDING, submission__expires_at__lte=now
        )
        .values_list("run_id", flat=True)
        .distinct()
    )
    for run_id in list(run_ids):
        with transaction.atomic():
            run = EnvRun.objects.select_for_update().get(pk=run_id)
            changed = list(
                EnvCompletion.objects.filter(
                    run=run, status=EnvCompletion.Status.PENDING, submission__expires_at__lte=now
                )
                .select_related("submission")
                .order_by("seq")
            )
            for completion in changed:
                completion.status = reward_status(
                    votes=completion.votes,
                    votes_per_completion=run.votes_per_completion,
                    expires_at=completion.submission.expires_at,
                    now=now,
                )
            changed = [c for c in changed if c.status != EnvCompletion.Status.PENDING]
            _renumber(run, changed)
            expired += len(changed)
    if expired:
        logger.info("env: %d reward records expired", expired)
    return expired


@dataclass(frozen=True)
class CancelOutcome:
    """What one cancel changed: the submissions with completions it cancelled, and how many."""

    submission_ids: tuple[uuid.UUID, ...]
    completions: int


def env_submissions_cancel(
    *,
    run: EnvRun,
    submission_id: uuid.UUID | None = None,
    older_than: timedelta | None = None,
    now: datetime | None = None,
) -> CancelOutcome:
    """Cancel the pending completions of ``run``'s submission ``submission_id`` (a 404 when the
    run has none of that id), or of its submissions created more than ``older_than`` ago.

    Each cancelled record is a change in the feed (a new number, status ``cancelled``) and is
    no longer served; complete and expired records stay as they are. A repeat finds nothing
    pending and changes nothing.
    """
    if (submission_id is None) == (older_than is None):
        raise ValueError("Pass one of submission_id and older_than.")
    now = now or timezone.now()
    with transaction.atomic():
        locked = EnvRun.objects.select_for_update().get(pk=run.pk)
        pending = EnvCompletion.objects.filter(run=locked, status=EnvCompletion.Status.PENDING)
        if submission_id is not None:
            if not EnvSubmission.objects.filter(run=locked, pk=submission_id).exists():
                raise not_found("Submission")
            pending = pending.filter(submission_id=submission_id)
        else:
            assert older_than is not None
            pending = pending.filter(submission__created_at__lte=now - older_than)
        changed = list(pending.order_by("seq"))
        for completion in changed:
            completion.status = EnvCompletion.Status.CANCELLED
        _renumber(locked, changed)
    return CancelOutcome(
        submission_ids=tuple(dict.fromkeys(c.submission_id for c in changed)),
        completions=len(changed),
    )
