"""Shared set-up of the environment tests: runs and groups through the services, visitors'
votes through the vote service, Celery run in-process."""

import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest

from arena.models import ArenaModel, Battle
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tokens import token_create
from environment.models import EnvBattle, EnvCompletion, EnvRun, EnvSubmission
from environment.runs import env_run_create, env_submission_create
from environment.serve import env_battle_serve


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Celery tasks run in the caller's process (the test settings use Redis as the broker
    when REDIS_URL is set, with no worker listening)."""
    from config.celery_app import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


def make_run(
    *,
    references: Sequence[ArenaModel] = (),
    share: float = 1.0,
    votes_per_completion: int = 3,
    ttl_hours: int = 72,
    webhook_url: str = "",
) -> EnvRun:
    token, _ = token_create(name=f"trainer-{uuid.uuid4().hex[:6]}", scopes=["env"])
    return env_run_create(
        token=token,
        name="run",
        references=[m.slug for m in references],
        share=share,
        votes_per_completion=votes_per_completion,
        ttl_hours=ttl_hours,
        webhook_url=webhook_url,
    )


def submit(
    run: EnvRun, texts: Sequence[str], prompt: object = "Write a haiku about rain."
) -> tuple[EnvSubmission, list[EnvCompletion]]:
    submission, created = env_submission_create(
        run=run,
        idempotency_key=uuid.uuid4().hex,
        prompt=prompt,
        completions=[{"text": t, "meta": {"index": i}} for i, t in enumerate(texts)],
    )
    assert created
    return submission, list(EnvCompletion.objects.filter(submission=submission).order_by("index"))


def side_text(env: EnvBattle, side: str) -> str:
    """What side ``a`` or ``b`` of an env battle shows."""
    return str(env.battle.messages.get(side=side, superseded_at__isnull=True).content)


def winner_by(rank: Callable[[EnvBattle, str], float]) -> Callable[[EnvBattle], str]:
    """A visitor who votes for the side with the higher ``rank`` (a tie when equal)."""

    def decide(env: EnvBattle) -> str:
        a, b = rank(env, "a"), rank(env, "b")
        return "model_a" if a > b else "model_b" if b > a else "tie"

    return decide


def judge(
    count: int,
    decide: Callable[[EnvBattle], str],
    *,
    prefix: str = "visitor",
    flagged_agent: bool = False,
    ip: str = "",
) -> list[Battle]:
    """``count`` visitors (one session each, from the address ``ip`` when given) are served an
    env battle and vote on it."""
    battles = []
    for n in range(count):
        session = f"{prefix}-{uuid.uuid4().hex[:8]}-{n}"
        terms_accept(voter_id=session)
        battle = env_battle_serve(session_key=session)
        if battle is None:
            break
        env = EnvBattle.objects.select_related("battle").get(battle=battle)
        vote_record(
            battle_id=battle.pk,
            session_key=session,
            voter_id=session,
            winner=decide(env),
            user_agent="curl/8.0" if flagged_agent else "Mozilla/5.0 (X11; Linux x86_64)",
            ip=ip,
        )
        battles.append(battle)
    return battles
