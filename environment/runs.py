"""Writes of the environment API: runs (create, close) and submissions (idempotent).

Why one module: runs and submissions are written under the same run row and the same caps; a
submission's checks read the run state that the run writes keep, so the writes of both sit
together.

A submission's prompt is stored twice: as submitted, every message in
``EnvSubmission.messages`` (system and earlier turns included, for the trainer's record and for
whatever shows context), and as a ``Prompt`` whose one turn is the final user message, which is
what the battle page puts before the two answers (a visitor judges the answers to that message;
the earlier turns have no answers of both sides to show). The prompt's source is
``env:<run id>`` so that pool and leaderboard reads never take it for a pool prompt.

A submission of a run with ``reward_model`` sends ``arena.signals.env_submission_created``
after it commits: the rating side's reward model scores its completions then
(``environment.model_rewards``).

Every completion of a new submission gets the next ``seq`` of its run's reward feed (status
pending), under the run's row lock, so it is in the feed at once and the feed's order holds.
"""

import hashlib
import json
import logging
import math
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from answer_style.counts import style_counts
from arena.errors import ArenaError, ErrorCode
from arena.inputs import json_too_deep, text_problem
from arena.models import ApiToken, ArenaModel, Completion, Prompt
from arena.signals import after_commit, env_submission_created, send_after_commit
from environment.model_rewards import model_rewards_check
from environment.models import EnvCompletion, EnvRun, EnvSubmission
from environment.outbound import OutboundRefused, OutboundUnresolved, outbound_check
from environment.payloads import Message
from environment.references import references_request

logger = logging.getLogger(__name__)

ENV_MODEL_DISPLAY_NAME = "Submitted answer"
ENV_PROMPT_SOURCE_PREFIX = "env:"
ROLES = ("system", "user", "assistant")
VOTES_PER_COMPLETION_RANGE = (1, 50)
TTL_HOURS_RANGE = (1, 720)
RUN_NAME_MAX = 200
IDEMPOTENCY_KEY_MAX = 200
WEBHOOK_URL_MAX = 500


def _invalid(field: str, message: str) -> ArenaError:
    return ArenaError(ErrorCode.INVALID, message, field=field)


def _text(value: object, *, field: str, max_chars: int, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise _invalid(field, f"{field} must be a string.")
    problem = text_problem(value)
    if problem is not None:
        raise _invalid(field, f"{field} {problem}.")
    if not allow_empty and not value.strip():
        raise _invalid(field, f"{field} must not be empty.")
    if len(value) > max_chars:
        raise _invalid(field, f"{field} is longer than {max_chars} characters.")
    return value


def _int_in(value: object, *, field: str, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(field, f"{field} must be a whole number from {low} to {high}.")
    return value


def env_model_slug(run_id: uuid.UUID) -> str:
    return f"env-{run_id.hex[:12]}"


def _references(slugs: object) -> list[ArenaModel]:
    """The reference models: active, and able to answer (a provider, or answers in the pool)."""
    if not isinstance(slugs, list | tuple) or not all(isinstance(s, str) for s in slugs):
        raise _invalid("references", "references must be a list of model slugs.")
    # The API's parser refuses these before any service runs; a caller from Python gets the
    # same 400 rather than the database's error.
    for i, slug in enumerate(slugs):
        problem = text_problem(slug)
        if problem is not None:
            raise _invalid(f"references.{i}", f"references.{i} {problem}.")
    wanted = list(dict.fromkeys(slugs))
    models = {m.slug: m for m in ArenaModel.objects.filter(slug__in=wanted, is_active=True)}
    pooled = set(
        Completion.objects.filter(
            model__in=list(models.values()), source=Completion.Source.POOL
        ).values_list("model__slug", flat=True)
    )
    unusable = [
        slug
        for slug in wanted
        if slug not in models or not (models[slug].is_live or slug in pooled)
    ]
    if unusable:
        raise _invalid(
            "references",
            "references must name active models with a provider or pool answers; not "
            + ", ".join(repr(s) for s in unusable)
            + ".",
        )
    return [models[slug] for slug in wanted]


def env_run_create(
    *,
    token: ApiToken,
    name: str,
    references: Sequence[str] | None = None,
    votes_per_completion: int = 3,
    ttl_hours: int = 72,
    share: float = 0.2,
    webhook_url: str | None = "",
    reward_model: bool = False,
) -> EnvRun:
    """A new open run of ``token``, with its hidden model (see ``EnvRun.model``) and a fresh
    webhook secret. Each invalid field is a 400 naming it (the values are checked at run time
    too: they may come from untrusted JSON); a ``webhook_url`` the guarded client would not send
    to is one of them. ``reward_model`` asks for model rewards at once
    (``environment.model_rewards``): where the reward model cannot run it is a 409 naming the
    field, and nothing is created. A token over its caps (``ARENA_ENV_MAX_OPEN_RUNS``,
    ``ARENA_ENV_RUNS_PER_HOUR``) gets a 429 with Retry-After."""
    name = _text(name, field="name", max_chars=RUN_NAME_MAX).strip()
    reference_models = _references([] if references is None else references)
    votes = _int_in(
        votes_per_completion, field="votes_per_completion", bounds=VOTES_PER_COMPLETION_RANGE
    )
    ttl = _int_in(ttl_hours, field="ttl_hours", bounds=TTL_HOURS_RANGE)
    if (
        isinstance(share, bool)
        or not isinstance(share, int | float)
        or not math.isfinite(share)
        or not 0 < share <= 1
    ):
        raise _invalid("share", "share must be a number above 0 and at most 1.")
    if webhook_url is None:
        webhook_url = ""
    url = _text(webhook_url, field="webhook_url", max_chars=WEBHOOK_URL_MAX, allow_empty=True)
    url = url.strip()
    if url:
        _webhook_url_check(url)
    if not isinstance(reward_model, bool):
        raise _invalid("reward_model", "reward_model must be true or false.")
    if reward_model:
        model_rewards_check()

    run_id = uuid.uuid4()
    with transaction.atomic():
        _run_caps_check(token=token)
        model = ArenaModel.objects.create(
            slug=env_model_slug(run_id),
            display_name=ENV_MODEL_DISPLAY_NAME,
            is_active=False,
            is_public=False,
            sampling_weight=0,
        )
        run = EnvRun.objects.create(
            id=run_id,
            token=token,
            name=name,
            model=model,
            votes_per_completion=votes,
            ttl_hours=ttl,
            share=float(share),
            webhook_url=url,
            webhook_secret=secrets.token_hex(32),
            reward_model=reward_model,
        )
        run.references.set(reference_models)
    return run


def _webhook_url_check(url: str) -> None:
    """A 400 naming ``webhook_url`` unless the guarded client would send to it now: its host
    resolves, and to no address the guard refuses. A host that does not resolve is refused too
    (a typo, or a name only the trainer's network knows): the trainer learns it at once rather
    than from failed deliveries. The guard checks again at every delivery, as DNS can change."""
    try:
        outbound_check(url)
    except (OutboundRefused, OutboundUnresolved) as exc:
        raise _invalid("webhook_url", f"webhook_url is refused: {exc}.") from None


# Nothing frees an open run's place but its close, so a retry after a minute is as good a
# guess as any.
OPEN_RUNS_RETRY_SECONDS = 60


def _run_caps_check(*, token: ApiToken) -> None:
    """A 429 (with Retry-After) when ``token`` holds ``ARENA_ENV_MAX_OPEN_RUNS`` open runs or
    created ``ARENA_ENV_RUNS_PER_HOUR`` in the last hour. Under the token's row lock, so
    concurrent creations of one token count each other."""
    ApiToken.objects.select_for_update().filter(pk=token.pk).first()
    max_open = settings.ARENA_ENV_MAX_OPEN_RUNS
    if max_open and EnvRun.objects.filter(token=token, state=EnvRun.State.OPEN).count() >= max_open:
        raise ArenaError(
            ErrorCode.TOO_MANY_RUNS,
            f"This token has {max_open} open runs, the most it may have; close one first.",
            status=429,
            retry_after=OPEN_RUNS_RETRY_SECONDS,
        )
    per_hour = settings.ARENA_ENV_RUNS_PER_HOUR
    if not per_hour:
        return
    now = timezone.now()
    recent = EnvRun.objects.filter(token=token, created_at__gt=now - timedelta(hours=1))
    if recent.count() >= per_hour:
        oldest = recent.order_by("created_at").values_list("created_at", flat=True).first()
        assert oldest is not None  # per_hour >= 1 runs in the window
        # When the oldest run of the window leaves it, a place is free.
        wait = (oldest + timedelta(hours=1) - now).total_seconds()
        raise ArenaError(
            ErrorCode.TOO_MANY_RUNS,
            f"This token created {per_hour} runs in the last hour, the most it may; "
            "try again later.",
            status=429,
            retry_after=max(1, math.ceil(wait)),
        )


def env_run_close(*, run: EnvRun, reason: str = EnvRun.ClosedReason.TRAINER) -> EnvRun:
    """Stop serving ``run`` and refuse its further submissions; closing a closed run changes
    nothing (it keeps its first reason). Its records stay readable."""
    with transaction.atomic():
        locked = EnvRun.objects.select_for_update().get(pk=run.pk)
        if locked.state != EnvRun.State.CLOSED:
            locked.state = EnvRun.State.CLOSED
            locked.closed_at = timezone.now()
            locked.closed_reason = reason
            locked.save(update_fields=["state", "closed_at", "closed_reason"])
    return locked


def run_closed_error(run: EnvRun) -> ArenaError:
    """The 409 of a call that needs an open run, naming the state and why it closed."""
    if run.closed_reason == EnvRun.ClosedReason.IDLE:
        why = (
            "closed_reason idle: its trainer made no call on it for "
            f"ARENA_ENV_RUN_IDLE_SECONDS ({settings.ARENA_ENV_RUN_IDLE_SECONDS} s)"
        )
    elif run.closed_reason == EnvRun.ClosedReason.STAFF:
        why = "closed_reason staff: the arena's staff closed it"
    else:
        why = "closed_reason trainer: its trainer closed it"
    return ArenaError(
        ErrorCode.RUN_CLOSED,
        f"This run's state is closed ({why}); it takes no submissions. Create a new run.",
        status=409,
    )


def env_run_idle_cutoff(now: datetime | None = None) -> datetime:
    """A run last touched at or before this moment has lost its lease."""
    return (now or timezone.now()) - timedelta(seconds=settings.ARENA_ENV_RUN_IDLE_SECONDS)


def env_run_touch(*, run: EnvRun) -> EnvRun:
    """Renew the lease of ``run``: its trainer called. An open run whose lease ran out before
    the sweep closed it is closed now, as the sweep would have (a late call does not revive
    it: visitors were already not served it). One UPDATE otherwise, no lock."""
    now = timezone.now()
    if run.state == EnvRun.State.OPEN and run.touched_at <= env_run_idle_cutoff(now):
        env_runs_idle_close(run_ids=[run.pk], now=now)
        run = EnvRun.objects.get(pk=run.pk)
    EnvRun.objects.filter(pk=run.pk).update(touched_at=now)
    run.touched_at = now
    return run


def env_runs_idle_close(
    *, run_ids: Sequence[uuid.UUID] | None = None, now: datetime | None = None
) -> int:
    """Close (reason ``idle``) the open runs whose lease has run out, of ``run_ids`` or all;
    returns how many. Each is checked again under its row lock, so a call that renewed the
    lease meanwhile keeps its run open. A rerun finds nothing more to close."""
    now = now or timezone.now()
    cutoff = env_run_idle_cutoff(now)
    candidates = EnvRun.objects.filter(state=EnvRun.State.OPEN, touched_at__lte=cutoff)
    if run_ids is not None:
        candidates = candidates.filter(pk__in=run_ids)
    closed = 0
    for run_id in list(candidates.values_list("pk", flat=True)):
        with transaction.atomic():
            locked = EnvRun.objects.select_for_update().get(pk=run_id)
            if locked.state != EnvRun.State.OPEN or locked.touched_at > cutoff:
                continue
            locked.state = EnvRun.State.CLOSED
            locked.closed_at = now
            locked.closed_reason = EnvRun.ClosedReason.IDLE
            locked.save(update_fields=["state", "closed_at", "closed_reason"])
            closed += 1
    if closed:
        logger.info("env: %d idle runs closed", closed)
    return closed


# A place under ARENA_ENV_MAX_PENDING_SUBMISSIONS frees when votes judge a submission, which no
# one can foresee, or when one expires or is cancelled: the retry is asked for after a minute,
# or at the next expiry when it comes sooner.
PENDING_RETRY_SECONDS = 60


def _pending_retry_after(run: EnvRun) -> int:
    next_expiry = (
        EnvSubmission.objects.filter(run=run, completions__status=EnvCompletion.Status.PENDING)
        .order_by("expires_at")
        .values_list("expires_at", flat=True)
        .first()
    )
    if next_expiry is None:
        return PENDING_RETRY_SECONDS
    wait = (next_expiry - timezone.now()).total_seconds()
    return max(1, min(PENDING_RETRY_SECONDS, math.ceil(wait)))


@dataclass(frozen=True)
class _Group:
    key: str
    messages: list[Message]
    completions: list[tuple[str, dict[str, Any]]]
    request_hash: str


def _messages(prompt: object) -> list[Message]:
    """The prompt as messages: a string is one user message; a list must end with a user
    message."""
    max_chars = settings.ARENA_ENV_MAX_PROMPT_CHARS
    if isinstance(prompt, str):
        return [{"role": "user", "content": _text(prompt, field="prompt", max_chars=max_chars)}]
    if not isinstance(prompt, list) or not prompt:
        raise _invalid("prompt", "prompt must be a string or a non-empty list of messages.")
    messages: list[Message] = []
    total = 0
    for i, item in enumerate(prompt):
        field = f"prompt.{i}"
        if not isinstance(item, dict) or set(item) != {"role", "content"}:
            raise _invalid(field, f"{field} must be an object with role and content only.")
        role = item["role"]
        if role not in ROLES:
            raise _invalid(f"{field}.role", f"{field}.role must be one of {', '.join(ROLES)}.")
        content = _text(
            item["content"],
            field=f"{field}.content",
            max_chars=max_chars,
            allow_empty=role != "user",
        )
        total += len(content)
        messages.append({"role": role, "content": content})
    if messages[-1]["role"] != "user":
        raise _invalid("prompt", "prompt must end with a user message.")
    if total > max_chars:
        raise _invalid("prompt", f"prompt is longer than {max_chars} characters in all.")
    return messages


def _meta(value: object, *, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(field, f"{field} must be a JSON object.")
    if json_too_deep(value):
        raise _invalid(field, f"{field} is nested too deep.")
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                raise _invalid(field, f"{field} {problem}.")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise _invalid(field, f"{field} holds a number JSON cannot carry (NaN or infinity).")
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > settings.ARENA_ENV_MAX_META_BYTES:
        raise _invalid(
            field, f"{field} is larger than {settings.ARENA_ENV_MAX_META_BYTES} bytes as JSON."
        )
    return value


def _group(*, idempotency_key: object, prompt: object, completions: object) -> _Group:
    key = _text(idempotency_key, field="idempotency_key", max_chars=IDEMPOTENCY_KEY_MAX)
    messages = _messages(prompt)
    max_group = settings.ARENA_ENV_MAX_GROUP
    if not isinstance(completions, list) or not completions:
        raise _invalid("completions", "completions must be a non-empty list.")
    if len(completions) > max_group:
        raise _invalid("completions", f"completions holds {len(completions)}; at most {max_group}.")
    group: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(completions):
        field = f"completions.{i}"
        if not isinstance(item, dict) or not set(item) <= {"text", "meta"} or "text" not in item:
            raise _invalid(field, f"{field} must be an object with text and, if any, meta.")
        text = _text(
            item["text"],
            field=f"{field}.text",
            max_chars=settings.ARENA_ENV_MAX_COMPLETION_CHARS,
            allow_empty=True,
        )
        group.append((text, _meta(item.get("meta"), field=f"{field}.meta")))
    canonical = json.dumps(
        {"prompt": messages, "completions": [{"text": t, "meta": m} for t, m in group]},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    request_hash = hashlib.sha256(canonical.encode()).hexdigest()
    return _Group(key=key, messages=messages, completions=group, request_hash=request_hash)


def _replay(existing: EnvSubmission, group: _Group) -> tuple[EnvSubmission, bool]:
    if existing.request_hash != group.request_hash:
        raise ArenaError(
            ErrorCode.IDEMPOTENCY_CONFLICT,
            "This idempotency_key was used with another request body; use a new key.",
            status=409,
            field="idempotency_key",
        )
    return existing, False


def env_submission_create(
    *,
    run: EnvRun,
    idempotency_key: str,
    prompt: str | list[dict[str, Any]],
    completions: list[dict[str, Any]],
) -> tuple[EnvSubmission, bool]:
    """The submission of a group of completions for one prompt, and whether it is new.

    The same ``idempotency_key`` with the same body is the first submission again (nothing is
    created); with another body it is a 409. A closed run refuses new submissions (409), and so
    does a run with ``ARENA_ENV_MAX_PENDING_SUBMISSIONS`` submissions still pending (429).
    """
    group = _group(idempotency_key=idempotency_key, prompt=prompt, completions=completions)
    # Counted before the lock: the tokenizer is the slow part and needs no lock.
    styles = [style_counts(text) for text, _ in group.completions]
    with transaction.atomic():
        locked = EnvRun.objects.select_for_update().get(pk=run.pk)
        existing = EnvSubmission.objects.filter(run=locked, idempotency_key=group.key).first()
        if existing is not None:
            return _replay(existing, group)
        if locked.state == EnvRun.State.CLOSED:
            raise run_closed_error(locked)
        pending = (
            EnvSubmission.objects.filter(
                run=locked, completions__status=EnvCompletion.Status.PENDING
            )
            .distinct()
            .count()
        )
        if pending >= settings.ARENA_ENV_MAX_PENDING_SUBMISSIONS:
            raise ArenaError(
                ErrorCode.TOO_MANY_PENDING,
                f"This run has {pending} submissions waiting for votes, the most it may have; "
                "submit again when some are judged, expired or cancelled.",
                status=429,
                retry_after=_pending_retry_after(locked),
            )
        try:
            with transaction.atomic():
                submission = _submission_insert(run=locked, group=group, styles=styles)
        except IntegrityError:
            # A concurrent request with the same key won (only possible for a caller that does
            # not hold the run's lock, which every path here takes; kept as the last word).
            existing = EnvSubmission.objects.filter(run=locked, idempotency_key=group.key).first()
            if existing is None:
                raise
            return _replay(existing, group)
        submission_id = submission.pk
        after_commit(lambda: references_request(submission_id=submission_id))
        if locked.reward_model:
            send_after_commit(
                env_submission_created,
                sender=EnvSubmission,
                submission_id=submission_id,
                run_id=locked.pk,
            )
    return submission, True


def _submission_insert(*, run: EnvRun, group: _Group, styles: list[Any]) -> EnvSubmission:
    now = timezone.now()
    prompt = Prompt.objects.create(
        source=f"{ENV_PROMPT_SOURCE_PREFIX}{run.pk}",
        turns=[group.messages[-1]["content"]],
        category="",
        language="",
    )
    submission = EnvSubmission.objects.create(
        run=run,
        idempotency_key=group.key,
        request_hash=group.request_hash,
        prompt=prompt,
        messages=group.messages,
        expires_at=now + timedelta(hours=run.ttl_hours),
    )
    first_seq = run.reward_seq + 1
    EnvCompletion.objects.bulk_create(
        EnvCompletion(
            run=run,
            submission=submission,
            index=index,
            text=text,
            meta=meta,
            style=style,
            seq=first_seq + index,
        )
        for index, ((text, meta), style) in enumerate(zip(group.completions, styles, strict=True))
    )
    run.reward_seq = first_seq + len(group.completions) - 1
    run.save(update_fields=["reward_seq"])
    return submission
