"""Reference models' answers to a submission's prompt: the pool's when the prompt is in the
pool, else generated once from the reference model's provider and stored.

Every reference answer a battle shows is a ``Completion`` with source ``reference`` on the
submission's own prompt (one per model: ``completion_one_reference_answer_per_model``):

- **From the pool.** When the submission is a single user message and a pool prompt starts
  with exactly that message, the reference model's pool answer to that first turn is copied
  (a one-turn prompt first; the first answer of a longer conversation was given to that message
  alone, before any later turn, so it answers the submission as well).
- **Generated.** Otherwise, when the model has a provider, the task
  ``arena.tasks.env_reference_answer`` asks it once (non-streaming, the submission's messages
  after the model's own system prompt, the model's generation parameters, the arena's output
  limit) and stores the answer. Failures are retried with back-off a few times, then logged;
  until an answer exists, the submission's completions meet only each other.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction

from arena.inputs import text_storable
from arena.models import ArenaModel, Completion, completion_turns_hash
from environment.models import EnvSubmission

if TYPE_CHECKING:
    from arena.live.upstream import UpstreamTarget

logger = logging.getLogger(__name__)

ANSWER_TASK = "arena.tasks.env_reference_answer"


class ReferenceFailed(Exception):
    """The provider did not give an answer (the task retries it)."""


def _single_user_turn(submission: EnvSubmission) -> str | None:
    messages = submission.messages
    if (
        isinstance(messages, list)
        and len(messages) == 1
        and isinstance(messages[0], dict)
        and messages[0].get("role") == "user"
    ):
        return str(messages[0].get("content", ""))
    return None


def _pool_answer(model: ArenaModel, text: str) -> Completion | None:
    """The model's pool answer to a prompt whose first turn is ``text``: its first answer was
    given to that one message alone (later turns came after it), so it answers the submission
    as it stands. A single-turn prompt is preferred when both exist."""
    answers = Completion.objects.filter(
        model=model, source=Completion.Source.POOL, prompt__turns__0=text
    ).exclude(prompt__source__startswith="env:")
    exact = answers.filter(prompt__turns=[text]).order_by("pk").first()
    return exact or answers.order_by("pk").first()


def _store(submission: EnvSubmission, model: ArenaModel, answer: str) -> Completion:
    """The reference answer, stored once (a concurrent store of the same one is the same)."""
    try:
        with transaction.atomic():
            turns = [text_storable(answer)]
            return Completion.objects.create(
                prompt_id=submission.prompt_id,
                model=model,
                turns=turns,
                turns_hash=completion_turns_hash(turns),
                source=Completion.Source.REFERENCE,
            )
    except IntegrityError:
        return Completion.objects.get(
            prompt_id=submission.prompt_id, model=model, source=Completion.Source.REFERENCE
        )


def _existing(submission: EnvSubmission, model: ArenaModel) -> bool:
    return Completion.objects.filter(
        prompt_id=submission.prompt_id, model=model, source=Completion.Source.REFERENCE
    ).exists()


def references_request(*, submission_id: uuid.UUID) -> None:
    """Make sure every reference model of the submission's run has (or will get) an answer to
    its prompt. Called after the submission commits."""
    submission = EnvSubmission.objects.select_related("run").get(pk=submission_id)
    single = _single_user_turn(submission)
    for model in submission.run.references.all():
        if _existing(submission, model):
            continue
        pooled = _pool_answer(model, single) if single is not None else None
        if pooled is not None and pooled.turns:
            _store(submission, model, str(pooled.turns[0]))
        elif model.is_live:
            _enqueue(submission.pk, model.pk)
        else:
            logger.warning(
                "env: reference %s has no pool answer to submission %s and no provider",
                model.slug,
                submission.pk,
            )


def _enqueue(submission_id: uuid.UUID, model_id: int) -> None:
    # By name: the arena's tasks module imports this one.
    try:
        current_app.tasks[ANSWER_TASK].apply_async(
            kwargs={"submission_id": str(submission_id), "model_id": model_id}
        )
    except Exception:
        logger.exception("env: could not queue a reference answer for %s", submission_id)


def _target(model: ArenaModel) -> UpstreamTarget:
    # The upstream module and the openai client are imported where an answer is generated (in
    # the worker's task), not when a web process imports this module to queue it: they add over
    # a second to every process's start-up.
    from arena.live.upstream import UpstreamTarget

    # One attempt per task run: the task's own retries (with back-off) are the retries.
    return UpstreamTarget.for_model(model, max_retries=0)


def _call(target: UpstreamTarget, messages: list[dict[str, str]]) -> str:
    from arena.live.upstream import UpstreamFailed, answer_whole

    try:
        return answer_whole(target, messages, max_tokens=settings.ARENA_LIVE_MAX_OUTPUT_TOKENS)
    except UpstreamFailed as exc:
        raise ReferenceFailed(str(exc)) from exc


def reference_answer_generate(*, submission_id: uuid.UUID, model_id: int) -> Completion | None:
    """Ask the model for its answer to the submission's messages and store it; an answer that
    exists already is kept (the task is idempotent). Raises ``ReferenceFailed``."""
    submission = EnvSubmission.objects.filter(pk=submission_id).first()
    model = ArenaModel.objects.select_related("provider").filter(pk=model_id).first()
    if submission is None or model is None or not model.is_live:
        return None
    existing = Completion.objects.filter(
        prompt_id=submission.prompt_id, model=model, source=Completion.Source.REFERENCE
    ).first()
    if existing is not None:
        return existing
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in submission.messages]
    answer = _call(_target(model), messages)
    return _store(submission, model, answer)
