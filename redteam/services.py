"""Playing a red-teaming challenge: an attempt started, its turns planned, judged and ended.

Why one module: an attempt's start, turns, verdicts and end share one row lock, one set of
refusals and one payload; split, each part would import every other.

A player is the arena's visitor: the pseudonymous voter id and the session hash of
``arena.identity``, the terms accepted and (when ``ARENA_CHALLENGE`` is on) the proof-of-work
challenge solved, as before a vote. An attempt draws one anonymous live model (as a live battle
draws, ``arena.live.draw``), skipping the models this player has used up today
(``ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY``) and those its client address has, whatever the
session (``ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY``, ``arena.daily_caps``). Each turn passes the live battle's prompt limits,
call rate and moderation; its answer streams in the consumer (``redteam.consumer``) and is then
judged (``redteam.judges``): a success ends the attempt with its evidence, and the turn or time
limit running out ends it as expired. The model is named only once the attempt has ended.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext

from arena.daily_caps import DailyCap, daily_caps_release, daily_caps_take
from arena.errors import ArenaError, ErrorCode, not_found, still_streaming
from arena.identity import ip_hash, session_hash, session_hash_matches, user_agent_class
from arena.inputs import text_storable
from arena.live.breaker import provider_failure_record, provider_success_record
from arena.live.draw import live_models_ready
from arena.live.limits import check_call_rate, clean_prompt
from arena.live.moderation import prompt_moderate
from arena.live.upstream import Answer, UpstreamTarget
from arena.models import ArenaModel
from arena.selectors import live_limits, terms_accepted
from arena.services.vote_guards import challenge_required_error
from arena.signals import send_after_commit
from redteam.judges import JudgeVerdict, judge_model_ask, phrase_judge, secret_judge
from redteam.models import Attempt, AttemptTurn, Challenge
from redteam.payloads import AttemptJson, ChallengeJson, TurnJson
from redteam.signals import attempt_ended

# Turns that took the player's turn: an answer that failed upstream gives the turn back.
_COUNTED = (AttemptTurn.Status.DONE, AttemptTurn.Status.STOPPED, AttemptTurn.Status.STREAMING)


@dataclass(frozen=True)
class Player:
    """Who plays, as the socket knows them."""

    session_key: str
    voter_id: str
    challenge_verified: bool = False
    client_ip: str | None = None
    user_agent: str | None = None


@dataclass(frozen=True)
class TurnPlan:
    """What the consumer streams: one answer of the attempt's model."""

    attempt_id: uuid.UUID
    turn: int
    prompt: str
    target: UpstreamTarget  # the model, with the challenge's system prompt (secret planted)
    history: list[dict[str, str]]
    max_tokens: int


@dataclass(frozen=True)
class TurnOutcome:
    """A turn's end: the saved turn, the attempt after it, and whether the judge failed."""

    turn: TurnJson
    attempt: AttemptJson
    judge_failed: bool = False

    @property
    def ended(self) -> bool:
        return self.attempt["state"] != Attempt.State.OPEN


@dataclass(frozen=True)
class AttemptEnded:
    """A turn refused because the attempt ran out of turns or time (and is now expired)."""

    attempt: AttemptJson


# --- payloads ---------------------------------------------------------------------------------
def challenge_json(challenge: Challenge) -> ChallengeJson:
    return {
        "slug": challenge.slug,
        "title": challenge.title,
        "rule": challenge.rule,
        "kind": challenge.kind,
        "difficulty": challenge.difficulty,
    }


def turn_json(turn: AttemptTurn) -> TurnJson:
    return {
        "turn": turn.turn,
        "prompt": turn.user_content,
        "content": turn.content,
        "status": turn.status,
        "verdict": turn.verdict,
    }


def attempt_json(attempt: Attempt, *, turns_used: int) -> AttemptJson:
    challenge = attempt.challenge
    ended = attempt.state != Attempt.State.OPEN
    deadline = _deadline(attempt)
    return {
        "id": str(attempt.pk),
        "challenge": challenge_json(challenge),
        "state": attempt.state,
        "turns_used": turns_used,
        "max_turns": challenge.max_turns,
        "deadline": deadline.isoformat() if deadline else None,
        "model": (
            {"name": attempt.model.display_name, "organization": attempt.model.organization}
            if ended
            else None
        ),
        "verdict_reason": attempt.verdict_reason,
        "evidence": attempt.evidence,
    }


def _deadline(attempt: Attempt) -> datetime | None:
    seconds = attempt.challenge.time_limit_seconds
    return attempt.created_at + timedelta(seconds=seconds) if seconds else None


def _judgeable(turn: AttemptTurn) -> bool:
    """An answer the judge decides on: finished, or stopped with some text (what a model
    said before the player stopped it counts)."""
    return bool(turn.content) and turn.status in (
        AttemptTurn.Status.DONE,
        AttemptTurn.Status.STOPPED,
    )


def _turns_used(attempt: Attempt) -> int:
    return attempt.turns.filter(status__in=_COUNTED).count()


# --- starting -----------------------------------------------------------------------------------
def _player_check(player: Player) -> None:
    """The session, the challenge and the terms, as a vote needs them."""
    if not player.session_key or not player.voter_id:
        raise ArenaError(
            ErrorCode.NO_SESSION, gettext("Open the red-teaming page first."), status=403
        )
    if settings.ARENA_CHALLENGE and not player.challenge_verified:
        raise challenge_required_error()
    if not terms_accepted(voter_id=player.voter_id):
        raise ArenaError(
            ErrorCode.TERMS_REQUIRED,
            gettext("Accept the terms before playing."),
            status=403,
            field="terms",
        )


def _challenge_pick(challenge_slug: object, rng: random.Random) -> Challenge:
    if challenge_slug in (None, ""):
        active = list(Challenge.objects.filter(is_active=True).select_related("judge_model"))
        if not active:
            raise not_found(gettext("Challenge"))
        return rng.choice(active)
    if not isinstance(challenge_slug, str) or len(challenge_slug) > 60:
        raise ArenaError(
            ErrorCode.INVALID, gettext("challenge must be a challenge's slug."), field="challenge"
        )
    challenge = (
        Challenge.objects.filter(slug=challenge_slug, is_active=True)
        .select_related("judge_model")
        .first()
    )
    if challenge is None:
        raise ArenaError(
            ErrorCode.NOT_FOUND, gettext("No such challenge."), status=404, field="challenge"
        )
    return challenge


def _lock_player(player_id: str) -> None:
    """Serialise one player's starts until the transaction ends, so two sockets starting at
    once cannot both pass the daily cap (SQLite's writers are serialised already)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"redteam-player:{player_id}"],
            )


def _day_start() -> datetime:
    today = timezone.now().astimezone(UTC).date()
    return datetime.combine(today, datetime.min.time(), tzinfo=UTC)


def _uncapped(candidates: list[ArenaModel], player_id: str) -> list[ArenaModel]:
    """The candidates this player has attempts left against today (UTC)."""
    cap = settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY
    if not cap:
        return candidates
    used = dict(
        Attempt.objects.filter(
            player_id=player_id,
            created_at__gte=_day_start(),
            model_id__in=[m.pk for m in candidates],
        )
        .values("model_id")
        .annotate(n=Count("pk"))
        .values_list("model_id", "n")
    )
    left = [m for m in candidates if used.get(m.pk, 0) < cap]
    if not left:
        raise ArenaError(
            ErrorCode.ATTEMPT_CAP,
            gettext(
                "You have used your %(cap)s attempts against every model for today (UTC); "
                "come back tomorrow."
            )
            % {"cap": cap}
            + " (ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY)",
            status=429,
        )
    return left


def _address_draw(
    left: list[ArenaModel], client_ip: str | None, rng: random.Random
) -> tuple[ArenaModel, list[str]]:
    """A model drawn by sampling weight among ``left``, skipping those the client address has
    used up today (UTC), whatever its sessions; the address's count taken for it, to give back
    (``daily_caps_release``) if the attempt is not made."""
    cap = settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY
    address = ip_hash(client_ip)
    while left:
        model = rng.choices(left, weights=[m.sampling_weight for m in left], k=1)[0]
        if not address:
            return model, []
        taken = daily_caps_take([DailyCap(f"arena:redteam-cap:ip:{address}:{model.pk}", cap)])
        if taken.over is None:
            return model, taken.keys
        left = [m for m in left if m.pk != model.pk]
    raise ArenaError(
        ErrorCode.ATTEMPT_CAP,
        gettext(
            "Your network has used its %(cap)s attempts against every model for today (UTC); "
            "come back tomorrow."
        )
        % {"cap": cap}
        + " (ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY)",
        status=429,
    )


def attempt_start(
    *, player: Player, challenge_slug: object, rng: random.Random | None = None
) -> AttemptJson:
    """Start an attempt at a challenge (by slug; none: any active one) against one anonymous
    live model, drawn by sampling weight among those the player has attempts left against.

    A challenge's judge model is never the model under test. Raises ``no_live_models`` when
    no live model is available, ``attempt_cap`` (429) when the player, or its client address,
    has used up every one.
    """
    _player_check(player)
    rng = rng or random.SystemRandom()
    challenge = _challenge_pick(challenge_slug, rng)
    candidates = [m for m in live_models_ready() if m.pk != challenge.judge_model_id]
    if not candidates:
        raise ArenaError(
            ErrorCode.NO_LIVE_MODELS,
            gettext("No model is available to play against right now; try again shortly."),
            status=503,
        )
    flags = ["bot_user_agent"] if user_agent_class(player.user_agent) == "bot" else []
    counted: list[str] = []
    try:
        with transaction.atomic():
            _lock_player(player.voter_id)
            left = _uncapped(candidates, player.voter_id)
            model, counted = _address_draw(left, player.client_ip, rng)
            attempt = Attempt.objects.create(
                challenge=challenge,
                model=model,
                player_id=player.voter_id,
                session_hash=session_hash(player.session_key),
                ip_hash=ip_hash(player.client_ip),
                flagged=bool(flags),
                flags=flags,
            )
    except Exception:
        daily_caps_release(counted)  # no attempt made: the address's count is given back
        raise
    return attempt_json(attempt, turns_used=0)


# --- turns ----------------------------------------------------------------------------------------
def _attempt_pk(attempt_id: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(attempt_id))
    except ValueError:
        raise ArenaError(
            ErrorCode.INVALID, gettext("attempt_id must be an attempt's id."), field="attempt_id"
        ) from None


def _locked(*, attempt_id: object, session_key: str | None) -> Attempt:
    """The attempt, its row locked; another session's is as unknown as a missing one."""
    attempt = (
        Attempt.objects.select_for_update(of=("self",))
        .select_related("challenge", "challenge__judge_model__provider", "model__provider")
        .filter(pk=_attempt_pk(attempt_id))
        .first()
    )
    if attempt is None or (
        session_key is not None and not session_hash_matches(attempt.session_hash, session_key)
    ):
        raise not_found(gettext("Attempt"))
    return attempt


def _refuse_unless_open(attempt: Attempt) -> None:
    if attempt.state != Attempt.State.OPEN:
        raise ArenaError(
            ErrorCode.NOT_CONTINUABLE,
            gettext("This attempt has ended (%(state)s); start a new one.")
            % {"state": attempt.get_state_display().lower()},
            status=409,
        )


def _end(attempt: Attempt, state: str, reason: str = "") -> None:
    """End the attempt (inside the caller's transaction); listeners hear after commit."""
    attempt.state = state
    attempt.verdict_reason = reason
    attempt.ended_at = timezone.now()
    attempt.save(update_fields=["state", "verdict_reason", "evidence", "ended_at"])
    attempt_id = attempt.pk
    send_after_commit(attempt_ended, sender=Attempt, attempt_id=attempt_id, state=state)


def _out_of_limits(attempt: Attempt, turns_used: int) -> str:
    """Why the attempt may take no more turns ("" while it may)."""
    challenge = attempt.challenge
    if challenge.max_turns and turns_used >= challenge.max_turns:
        return "turn limit reached"
    deadline = _deadline(attempt)
    if deadline is not None and timezone.now() >= deadline:
        return "time limit reached"
    return ""


def system_prompt(challenge: Challenge, model: ArenaModel) -> str:
    """The model's own system prompt, then the challenge's with its secret planted."""
    planted = challenge.system_prompt
    if challenge.kind == Challenge.Kind.SECRET:
        planted = planted.replace("{secret}", challenge.target)
    return "\n\n".join(part for part in (model.system_prompt, planted) if part.strip())


def attempt_turn_add(
    *, attempt_id: object, session_key: str, prompt: object, client_ip: str | None = None
) -> TurnPlan | AttemptEnded:
    """Plan the attempt's next turn: the player's message to its model.

    The prompt passes the live battle's length limit, call rate and moderation first. An
    attempt out of turns or time ends (expired) instead: ``AttemptEnded``.
    """
    limits = live_limits()
    text = clean_prompt(prompt, limits)
    check_call_rate(client_ip)  # counted first, so a refused prompt costs a call too
    prompt_moderate(text=text, session_key=session_key, client_ip=client_ip)
    with transaction.atomic():
        attempt = _locked(attempt_id=attempt_id, session_key=session_key)
        _refuse_unless_open(attempt)
        turns = list(attempt.turns.order_by("turn"))
        _settle_stale(turns)
        if any(t.status == AttemptTurn.Status.STREAMING for t in turns):
            raise still_streaming()
        if any(_judgeable(t) and t.verdict is None for t in turns):
            raise ArenaError(
                ErrorCode.JUDGE_UNAVAILABLE,
                gettext("The judge has not decided on the last answer yet; ask it again first."),
                status=409,
            )
        used = sum(1 for t in turns if t.status in _COUNTED)
        why = _out_of_limits(attempt, used)
        if why:
            _end(attempt, Attempt.State.EXPIRED, why)
            return AttemptEnded(attempt=attempt_json(attempt, turns_used=used))
        history: list[dict[str, str]] = []
        for t in turns:
            if t.status in _COUNTED and t.content:
                history += [
                    {"role": "user", "content": t.user_content},
                    {"role": "assistant", "content": t.content},
                ]
        history.append({"role": "user", "content": text})
        turn = AttemptTurn.objects.create(attempt=attempt, turn=len(turns), user_content=text)
        target = replace(
            UpstreamTarget.for_model(attempt.model),
            system_prompt=system_prompt(attempt.challenge, attempt.model),
        )
        return TurnPlan(
            attempt_id=attempt.pk,
            turn=turn.turn,
            prompt=text,
            target=target,
            history=history,
            max_tokens=limits.max_output_tokens,
        )


def _settle_stale(turns: list[AttemptTurn]) -> None:
    """A turn left streaming longer than ``ARENA_LIVE_STALE_SECONDS`` (its worker is gone)
    is stopped, so that the attempt can go on."""
    stale = timezone.now() - timedelta(seconds=settings.ARENA_LIVE_STALE_SECONDS)
    for t in turns:
        if t.status == AttemptTurn.Status.STREAMING and t.created_at < stale:
            t.status = AttemptTurn.Status.STOPPED
            t.save(update_fields=["status"])


def attempt_turn_finish(*, plan: TurnPlan, answer: Answer) -> TurnOutcome:
    """Save a streamed answer, then judge it (a finished answer of an open attempt).

    The provider's breaker hears of the answer as a live battle's. A failed judge leaves the
    turn unjudged (``judge_failed``): the page asks again with ``attempt_rejudge``.
    """
    status = {
        "done": AttemptTurn.Status.DONE,
        "error": AttemptTurn.Status.ERRORED,
    }.get(answer.status, AttemptTurn.Status.STOPPED)
    AttemptTurn.objects.filter(attempt_id=plan.attempt_id, turn=plan.turn).update(
        content=text_storable(answer.text),
        status=status,
        finish_reason=answer.finish_reason[:40],
        error=answer.error[:2000],
        latency_ms=answer.latency_ms,
    )
    provider_id = plan.target.provider_id
    if provider_id is not None:
        if answer.provider_failed:
            provider_failure_record(provider_id=provider_id)
        elif answer.status == "done":
            provider_success_record(provider_id=provider_id)
    return _judge_turn(attempt_id=plan.attempt_id, turn_no=plan.turn, session_key=None)


def attempt_rejudge(*, attempt_id: object, session_key: str) -> TurnOutcome:
    """Ask the judge again about the last answer it could not decide on."""
    waiting = AttemptTurn.objects.filter(
        attempt_id=_attempt_pk(attempt_id), verdict__isnull=True
    ).order_by("-turn")
    turn = next((t for t in waiting if _judgeable(t)), None)
    if turn is None:
        raise ArenaError(ErrorCode.INVALID, gettext("No answer is waiting for the judge."))
    return _judge_turn(attempt_id=turn.attempt_id, turn_no=turn.turn, session_key=session_key)


def _verdict(attempt: Attempt, turns: list[AttemptTurn], turn: AttemptTurn) -> JudgeVerdict:
    """The judge of the attempt's challenge on ``turn``'s answer (the judge model may be
    called: no transaction is open)."""
    challenge = attempt.challenge
    if challenge.kind == Challenge.Kind.PHRASE:
        return phrase_judge(answer=turn.content, phrase=challenge.target)
    if challenge.kind == Challenge.Kind.SECRET:
        return secret_judge(
            answer=turn.content,
            secret=challenge.target,
            player_messages=[t.user_content for t in turns if t.turn <= turn.turn],
        )
    judge = challenge.judge_model
    assert judge is not None  # noqa: S101  (a database constraint)
    conversation = [
        (t.user_content, t.content)
        for t in turns
        if t.turn <= turn.turn and t.status in _COUNTED and t.content
    ]
    return judge_model_ask(
        target=UpstreamTarget.for_model(judge),
        rubric=challenge.judge_rubric,
        conversation=conversation,
    )


def _judge_turn(*, attempt_id: uuid.UUID, turn_no: int, session_key: str | None) -> TurnOutcome:
    attempt = (
        Attempt.objects.select_related("challenge__judge_model__provider", "model")
        .filter(pk=attempt_id)
        .first()
    )
    if attempt is None or (
        session_key is not None and not session_hash_matches(attempt.session_hash, session_key)
    ):
        raise not_found(gettext("Attempt"))
    turns = list(attempt.turns.order_by("turn"))
    turn = next(t for t in turns if t.turn == turn_no)
    verdict: JudgeVerdict | None = None
    failed = False
    if attempt.state == Attempt.State.OPEN and _judgeable(turn):
        try:
            verdict = _verdict(attempt, turns, turn)
        except ArenaError as exc:
            if exc.code != ErrorCode.JUDGE_UNAVAILABLE:
                raise
            failed = True
    with transaction.atomic():
        attempt = _locked(attempt_id=attempt_id, session_key=None)
        turn = AttemptTurn.objects.get(attempt=attempt, turn=turn_no)
        if verdict is not None and attempt.state == Attempt.State.OPEN:
            turn.verdict = verdict.as_json()
            turn.save(update_fields=["verdict"])
            if verdict.success:
                evidence = verdict.evidence.as_json() if verdict.evidence else {}
                attempt.evidence = {**evidence, "turn": turn_no}
                _end(attempt, Attempt.State.SUCCEEDED, verdict.reason)
        used = _turns_used(attempt)
        if attempt.state == Attempt.State.OPEN and not failed:
            why = _out_of_limits(attempt, used)
            if why:
                _end(attempt, Attempt.State.EXPIRED, why)
        return TurnOutcome(
            turn=turn_json(turn),
            attempt=attempt_json(attempt, turns_used=used),
            judge_failed=failed,
        )


def attempt_surrender(*, attempt_id: object, session_key: str) -> AttemptJson:
    """Give up: the attempt ends and its model is revealed."""
    with transaction.atomic():
        attempt = _locked(attempt_id=attempt_id, session_key=session_key)
        _refuse_unless_open(attempt)
        _end(attempt, Attempt.State.SURRENDERED, "the player surrendered")
        return attempt_json(attempt, turns_used=_turns_used(attempt))
