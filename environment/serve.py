"""Which environment battle, if any, a visitor's next pool battle is.

A visitor who asks for a pool battle (``arena.services.battles.battle_start_pool``) is served
an environment battle instead when some open run has work and its ``share`` allows one more:

- **Share.** ``share`` is the highest fraction of the battles served to visitors that may come
  from the run. Run R may serve one more when ``(R's env battles + 1) <= R.share * (battles
  created since R was created + 1)``: counting the battle about to be served on both sides keeps
  the run's fraction at or under ``share`` at every moment (the first env battle of a run with
  share 0.2 waits for four other battles). The count is taken again under the run's row lock
  before the battle is created, so concurrent visitors cannot push a run over its share.
- **Work.** A completion has work while it is pending, its submission has not expired, its run
  is open and leased (its trainer made a call on it within ``ARENA_ENV_RUN_IDLE_SECONDS``: a
  crashed trainer's run takes no more battles), and its counted votes (unflagged) plus its
  battles served but not yet voted in the last ``ARENA_ENV_BATTLE_HOLD_SECONDS`` (the hold) fall
  short of the run's ``votes_per_completion``. Counting recent unvoted battles spreads concurrent
  visitors over the group instead of serving everyone the same pair; a battle left unvoted stops
  counting after the hold, so an abandoned battle stalls its group no longer than that. A vote
  that arrives later still counts (the visitor did compare the two answers; the rewards are
  refitted).
- **Run.** Among the open runs with work whose share allows one more, one is drawn at random,
  weighted by share (the next is tried if it has no servable pair).
- **Pair.** Every completion with work may meet any other member of its group that has not
  expired, or a reference model's answer that exists (the GRPO-style group comparison plus
  the references), except a pair another session holds (served to it within the hold and not
  voted): one pair is never in front of two visitors at once (the run's row lock makes each
  serve see the pairs served before it). Of all the others, one this session has not been
  served yet is taken whenever there is one; then, in a run with ``reward_model``, the pair
  whose completion with work has the widest model interval (active selection: the answers the
  reward model is least sure of go to visitors first; a completion not yet scored counts as
  width 0, as does every completion of other runs); then the pair served least often (every battle
  counts, voted, flagged or not), so that every pair of a group is shown before any is shown
  again; then the one whose sides are least judged (judged = counted votes + recent unvoted
  battles), which spreads concurrent visitors over the group; ties are broken at random. A
  completion with no possible opponent (a group of one without reference answers yet) waits.

The battle is an ordinary anonymous battle (source ``env``, state ready): the run's hidden
model (shown as "Submitted answer" after the vote) stands for a submitted side, the reference
model for a reference side; sides are in random order; ``EnvBattle`` records which completion
is where.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings
from django.db import transaction
from django.db.models import (
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.utils import timezone

from answer_style import style_counts
from arena.identity import session_hash
from arena.inputs import text_storable
from arena.leaks import answer_names_model
from arena.models import Battle, BattleMessage, Completion
from environment.models import EnvBattle, EnvCompletion, EnvRun
from environment.runs import env_run_idle_cutoff


def served_hold() -> timedelta:
    """How long a battle served but not yet voted holds its pair and counts as judging it."""
    return timedelta(seconds=settings.ARENA_ENV_BATTLE_HOLD_SECONDS)


class _SubqueryCount(Subquery):
    """``COUNT(*)`` of a correlated subquery (an annotation that stays one SQL statement)."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) _count)"
    output_field = IntegerField()


def _in_flight(now: datetime) -> Q:
    """Env battles served within the hold and not voted yet."""
    return Q(battle__state=Battle.State.READY, battle__created_at__gte=now - served_hold())


def _counted_or_in_flight(now: datetime) -> Q:
    """Env battles that count towards a side's judgements: voted (an unflagged vote its group's
    fit counts: the source bound may leave one out), or served within the hold and not voted
    yet."""
    return Q(battle__vote__flagged=False, counted=True) | _in_flight(now)


def _judged(now: datetime) -> _SubqueryCount:
    """Per ``EnvCompletion`` row: its counted votes plus its recent unvoted battles."""
    involving = Q(completion_a=OuterRef("pk")) | Q(completion_b=OuterRef("pk"))
    return _SubqueryCount(
        EnvBattle.objects.filter(involving).filter(_counted_or_in_flight(now)).values("pk")
    )


class _Judged(TypedDict):
    judged: int


if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    _JudgedCompletion = WithAnnotations[EnvCompletion, _Judged]
else:  # the alias is for the type checker; at run time the rows are plain EnvCompletions
    _JudgedCompletion = EnvCompletion


def _with_work(run: EnvRun, now: datetime) -> QuerySet[_JudgedCompletion]:
    """The run's completions with work, least judged first (then in feed order)."""
    return (
        EnvCompletion.objects.filter(
            run=run, status=EnvCompletion.Status.PENDING, submission__expires_at__gt=now
        )
        .annotate(judged=_judged(now))
        .filter(judged__lt=F("run__votes_per_completion"))
        .select_related("submission")
        .order_by("judged", "seq")
    )


def _share_allows(run: EnvRun) -> bool:
    env = EnvBattle.objects.filter(run=run).count()
    total = Battle.objects.filter(created_at__gte=run.created_at).count()
    return env + 1 <= run.share * (total + 1)


def _leased(now: datetime) -> QuerySet[EnvRun]:
    """The open runs whose trainer has called within ``ARENA_ENV_RUN_IDLE_SECONDS``: a run
    whose lease ran out is served to no visitor, even before the sweep closes it."""
    return EnvRun.objects.filter(state=EnvRun.State.OPEN, touched_at__gt=env_run_idle_cutoff(now))


def env_runs_open() -> bool:
    """Whether any run is open and leased: the one query an ordinary pool battle pays for
    environments."""
    return _leased(timezone.now()).exists()


def env_work_available() -> bool:
    """Whether a pool-battle request could now be served an environment battle (some open run
    has a completion with work and room under its share)."""
    now = timezone.now()
    return any(_share_allows(run) and _with_work(run, now).exists() for run in _leased(now))


@dataclass(frozen=True)
class _Side:
    """One side of a candidate pair: a submitted completion, or a reference model's answer."""

    key: str  # "c:<completion id>" or "r:<model id>"
    judged: int
    completion: EnvCompletion | None = None
    reference: Completion | None = None


def _pair_key(
    a: uuid.UUID | None, b: uuid.UUID | None, model_a: int, model_b: int
) -> frozenset[str]:
    """An env battle's pair as side keys (a missing completion is the side's reference model)."""
    return frozenset(
        (
            f"c:{a}" if a is not None else f"r:{model_a}",
            f"c:{b}" if b is not None else f"r:{model_b}",
        )
    )


def _pick_pair(
    run: EnvRun, hashed_session: str, now: datetime, rng: random.Random
) -> tuple[_Side, _Side] | None:
    """The pair to serve: of every pair in a group with a completion with work (the group's
    other members that have not expired, and the reference answers) that no other session
    holds, one this session has not been served when there is one, then the one served least,
    then the one whose sides are least judged, ties broken at random. Five queries whatever
    the run's size."""
    working = list(_with_work(run, now))
    if not working:
        return None
    submission_ids = {c.submission_id for c in working}
    members: dict[uuid.UUID, list[_JudgedCompletion]] = {}
    for member in (
        EnvCompletion.objects.filter(submission_id__in=submission_ids)
        .exclude(status__in=[EnvCompletion.Status.EXPIRED, EnvCompletion.Status.CANCELLED])
        .annotate(judged=_judged(now))
    ):
        members.setdefault(member.submission_id, []).append(member)
    served: dict[frozenset[str], int] = {}
    seen: set[frozenset[str]] = set()
    held: set[frozenset[str]] = set()
    reference_judged: dict[tuple[uuid.UUID, int], int] = {}
    # One row per pair served (not per battle): how often, whether to this session, and how
    # many of those battles count towards a reference side's judgements.
    battles = (
        EnvBattle.objects.filter(submission_id__in=submission_ids)
        .values(
            "submission_id",
            "completion_a_id",
            "completion_b_id",
            "battle__model_a_id",
            "battle__model_b_id",
        )
        .order_by()
        .annotate(
            n=Count("pk"),
            mine=Count("pk", filter=Q(battle__session_hash=hashed_session)),
            counted=Count("pk", filter=_counted_or_in_flight(now)),
            # Held by another session; a visitor's own unvoted battle does not keep its pair
            # from that same visitor (a repeat is better than nothing, as for seen pairs).
            held=Count("pk", filter=_in_flight(now) & ~Q(battle__session_hash=hashed_session)),
        )
    )
    for row in battles:
        a, b = row["completion_a_id"], row["completion_b_id"]
        model_a, model_b = row["battle__model_a_id"], row["battle__model_b_id"]
        pair = _pair_key(a, b, model_a, model_b)
        served[pair] = served.get(pair, 0) + row["n"]
        if row["mine"]:
            seen.add(pair)
        if row["held"]:
            held.add(pair)
        for completion_id, model_id in ((a, model_a), (b, model_b)):
            if completion_id is None and row["counted"]:
                key = (row["submission_id"], model_id)
                reference_judged[key] = reference_judged.get(key, 0) + row["counted"]
    references: dict[uuid.UUID, list[Completion]] = {}
    reference_ids = list(run.references.values_list("pk", flat=True))
    if reference_ids:
        prompts = {c.submission.prompt_id: c.submission_id for c in working}
        for answer in Completion.objects.filter(
            prompt_id__in=prompts, source=Completion.Source.REFERENCE, model_id__in=reference_ids
        ).select_related("model"):
            references.setdefault(prompts[answer.prompt_id], []).append(answer)

    best: tuple[tuple[bool, float, int, int, float], tuple[_Side, _Side]] | None = None
    for completion in working:
        width = _model_width(run, completion)
        me = _Side(key=f"c:{completion.pk}", judged=completion.judged, completion=completion)
        submission_id = completion.submission_id
        others = [
            _Side(key=f"c:{m.pk}", judged=m.judged, completion=m)
            for m in members.get(submission_id, [])
            if m.pk != completion.pk
        ] + [
            _Side(
                key=f"r:{answer.model_id}",
                judged=reference_judged.get((submission_id, answer.model_id), 0),
                reference=answer,
            )
            for answer in references.get(submission_id, [])
        ]
        for other in others:
            pair = frozenset((me.key, other.key))
            if pair in held:
                continue
            rank = (
                pair in seen,
                -width,
                served.get(pair, 0),
                me.judged + other.judged,
                rng.random(),
            )
            if best is None or rank < best[0]:
                best = (rank, (me, other))
    return None if best is None else best[1]


def _model_width(run: EnvRun, completion: EnvCompletion) -> float:
    """The width of the reward model's interval of ``completion`` (Elo points) in a run with
    ``reward_model``, the active selection's key; 0 otherwise and before the model scored it."""
    if not run.reward_model or completion.model_score_low is None:
        return 0.0
    assert completion.model_score_high is not None  # noqa: S101  (stored together)
    return float(completion.model_score_high - completion.model_score_low)


def _side_model_and_text(run: EnvRun, side: _Side) -> tuple[int, str, Any]:
    if side.completion is not None:
        text = side.completion.text
        return run.model_id, text, side.completion.style
    assert side.reference is not None  # noqa: S101  (a side is one or the other)
    turns = side.reference.turns
    return side.reference.model_id, str(turns[0]) if turns else "", None


def _final_user_message(messages: Any) -> str:
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content", ""))
    return ""


def _create(run: EnvRun, pair: tuple[_Side, _Side], session_key: str, rng: random.Random) -> Battle:
    first, second = pair
    side_a, side_b = (first, second) if rng.random() < 0.5 else (second, first)
    completion = first.completion
    assert completion is not None  # noqa: S101  (the first side is always a submitted one)
    submission = completion.submission
    model_a, text_a, style_a = _side_model_and_text(run, side_a)
    model_b, text_b, style_b = _side_model_and_text(run, side_b)
    battle = Battle.objects.create(
        mode=Battle.Mode.ANONYMOUS,
        source=Battle.Source.ENV,
        model_a_id=model_a,
        model_b_id=model_b,
        prompt_id=submission.prompt_id,
        session_hash=session_hash(session_key),
        state=Battle.State.READY,
    )
    user = text_storable(_final_user_message(submission.messages))
    BattleMessage.objects.bulk_create(
        [
            BattleMessage(
                battle=battle,
                side=side,
                turn=0,
                user_content=user,
                content=(answer := text_storable(text)),
                style=style if style is not None else style_counts(answer),
                # A reference model's answer may name it (arena.leaks); a submitted completion
                # stands for the run's hidden model, whose names mean nothing to a visitor.
                names_model=reference is not None
                and answer_names_model(answer, model=reference.model, user_turns=[user]),
                status=BattleMessage.Status.DONE,
                finish_reason="stop",
            )
            for side, text, style, reference in (
                ("a", text_a, style_a, side_a.reference),
                ("b", text_b, style_b, side_b.reference),
            )
        ]
    )
    EnvBattle.objects.create(
        battle=battle,
        run=run,
        submission=submission,
        completion_a=side_a.completion,
        completion_b=side_b.completion,
    )
    return battle


def env_battle_serve(*, session_key: str, rng: random.Random | None = None) -> Battle | None:
    """An environment battle for this session, or None (then a pool battle is served).

    Costs one query when no run is open (the leased runs' read, empty). See the module's
    docstring for the rules.
    """
    rng = rng or random.SystemRandom()
    now = timezone.now()
    runs = [run for run in _leased(now) if _share_allows(run) and _with_work(run, now).exists()]
    hashed_session = session_hash(session_key)
    while runs:
        run = rng.choices(runs, weights=[r.share for r in runs], k=1)[0]
        runs.remove(run)
        battle = _serve_from(run.pk, hashed_session, session_key, now, rng)
        if battle is not None:
            return battle
    return None


def _serve_from(
    run_id: uuid.UUID, hashed_session: str, session_key: str, now: datetime, rng: random.Random
) -> Battle | None:
    with transaction.atomic():
        # The run's lock serialises its serves, so the share is checked against committed
        # env battles of the run and two visitors cannot both take the last allowed one.
        run = _leased(now).select_for_update().filter(pk=run_id).first()
        if run is None or not _share_allows(run):
            return None
        pair = _pick_pair(run, hashed_session, now, rng)
        if pair is None:
            return None
        return _create(run, pair, session_key, rng)
