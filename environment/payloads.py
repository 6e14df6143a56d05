"""The environment API's JSON bodies, typed once (the API's response schemas are these).

A reward record (``RewardRecord``) is the same dict in the rewards feed and in a webhook's body.

``win_rate`` is ``(wins + 0.5 * (ties + both_bad)) / votes``, or null while ``votes`` is 0: a
"both bad" vote is a tie for the win rate, as the arena's ratings count it (the Bradley-Terry
fit behind ``score`` scores both kinds of tie as half a win). ``ties`` and ``both_bad`` are
still reported apart, so a trainer may weigh "both bad" otherwise. The four counts are
disjoint: ``votes == wins + losses + ties + both_bad`` (``ties`` counts "tie" votes only).
"""

from typing import Any, Literal

# typing_extensions' TypedDict: pydantic (the API's response validation and schema) reads it on
# every supported Python, typing's only from 3.12 on.
from typing_extensions import TypedDict

RunState = Literal["open", "closed"]
# Why a closed run is closed: its trainer closed it, it stopped calling for
# ARENA_ENV_RUN_IDLE_SECONDS (the lease ran out), or staff closed it; null while open.
ClosedReason = Literal["trainer", "idle", "staff"]
RewardStatus = Literal["pending", "complete", "expired", "cancelled"]
# Whose score a record shows: visitors' votes, or the reward model's (runs with reward_model).
RewardSource = Literal["human", "model"]
WebhookStatus = Literal["none", "delivered", "failed", "refused"]
Role = Literal["system", "user", "assistant"]


class Message(TypedDict):
    role: Role
    content: str


class RunCounts(TypedDict):
    """What a run holds and how far its judging has got."""

    submissions: int
    completions: int
    pending: int
    complete: int
    expired: int
    cancelled: int
    votes: int  # votes counted in the reward records (flagged ones excluded)
    battles: int  # environment battles served to visitors


class WebhookDelivery(TypedDict):
    """The outcome of the run's latest webhook delivery attempt: ``none`` before the first (or
    without a webhook), ``delivered``, ``failed`` (the receiver's status, a redirect, a timeout,
    a connection) or ``refused`` (the host resolved to an address the arena does not send to);
    ``error`` says what went wrong."""

    status: WebhookStatus
    error: str | None
    attempted_at: str | None


class RunPayload(TypedDict):
    """``GET /runs/{id}``, ``POST /runs/{id}/close``."""

    id: str
    name: str
    state: RunState
    references: list[str]
    votes_per_completion: int
    ttl_hours: int
    share: float
    webhook_url: str  # its userinfo, if an older run holds one, masked
    reward_model: bool  # model rewards at once (environment.model_rewards)
    webhook_delivery: WebhookDelivery
    created_at: str
    closed_at: str | None
    closed_reason: ClosedReason | None
    last_activity_at: str  # the trainer's last authenticated call on the run (its lease)
    counts: RunCounts


class RunSummary(TypedDict):
    """One run in ``GET /runs``."""

    id: str
    name: str
    state: RunState
    closed_reason: ClosedReason | None
    created_at: str
    closed_at: str | None
    last_activity_at: str
    counts: RunCounts


class RunsPage(TypedDict):
    """``GET /runs?offset=O&limit=N``: the token's runs, newest first; ``next_offset`` is the
    ``offset`` of the next page, null after the last."""

    runs: list[RunSummary]
    next_offset: int | None


class RunCreated(RunPayload):
    """``POST /runs`` (201): the run, and once only, the key its webhook bodies are signed with
    (``X-Arena-Signature: sha256=<hex HMAC-SHA256 of the body>``)."""

    webhook_secret: str


class SubmittedCompletion(TypedDict):
    id: str
    index: int


class SubmissionPayload(TypedDict):
    """``POST /runs/{id}/submissions``: 201 when created, 200 (same ids) when replayed."""

    id: str
    run_id: str
    idempotency_key: str
    completions: list[SubmittedCompletion]
    created_at: str
    expires_at: str


class CancelResult(TypedDict):
    """``POST /runs/{id}/submissions/cancel`` and ``.../submissions/{sid}/cancel``: the
    submissions this call cancelled pending completions of, and how many completions; a
    repeat cancels nothing more and answers empty."""

    submission_ids: list[str]
    completions: int


class RewardRecord(TypedDict):
    """One completion's reward so far; see the module docstring for ``win_rate``.

    ``score`` is the completion's Bradley-Terry rating within its group and the references, on
    the Elo scale with 0 the group's mean, and ``score_low``/``score_high`` its 95% interval
    (null until fitted). ``source`` says whose: ``"human"`` (visitors' votes, which supersede
    the model's as soon as they give a score), ``"model"`` (the reward model's reward, on the
    same scale and with its Laplace interval: runs with ``reward_model`` only), or null.
    """

    completion_id: str
    submission_id: str
    meta: dict[str, Any]
    votes: int
    wins: int
    losses: int
    ties: int
    both_bad: int
    win_rate: float | None
    score: float | None
    score_low: float | None
    score_high: float | None
    source: RewardSource | None
    status: RewardStatus


class RewardsPage(TypedDict):
    """``GET /runs/{id}/rewards?cursor=C&limit=N``: the records changed after ``C``, in the
    order they changed; pass ``next_cursor`` as the next ``cursor``."""

    records: list[RewardRecord]
    next_cursor: int


def win_rate(*, votes: int, wins: int, ties: int, both_bad: int) -> float | None:
    """The share of votes won, a tie (either kind) counting half; None without votes."""
    if votes == 0:
        return None
    return (wins + 0.5 * (ties + both_bad)) / votes
