"""Recording a visitor's vote."""

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

from django.conf import settings
from django.db import IntegrityError, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from django.utils.translation import gettext

from answer_style import AnswerStyle, conv_metadata, style_counts
from arena import rows
from arena.errors import ALREADY_VOTED_MESSAGE, ArenaError, ErrorCode, not_found
from arena.identity import ip_hash, session_hash_matches, user_agent_class
from arena.leaks import IDENTITY_LEAK
from arena.live.sweep import orphan_check, settling_orphans
from arena.models import (
    INTERFACE_LANGUAGE_MAX,
    ArenaModel,
    Battle,
    BattleMessage,
    TermsAcceptance,
    Vote,
)
from arena.payloads import WINNERS, Winner, is_winner
from arena.selectors import battle_current_messages, battle_pk, prompt_image_count_sql
from arena.services.vote_guards import (
    challenge_required_error,
    vote_caps_release,
    vote_caps_take,
)
from arena.signals import send_after_commit, vote_recorded


@dataclass(frozen=True)
class RecordedVote:
    """A vote just recorded, with its battle (models loaded) and the battle's current messages,
    so that the answer to the vote reads nothing back."""

    vote: Vote  # vote.battle: the battle as the vote left it
    messages: list[BattleMessage]


def vote_cast(
    *,
    battle_id: object,
    session_key: str,
    voter_id: str,
    challenge_passed: bool,
    winner: object,
    ran: object = None,
    ip: str | None = None,
    user_agent: str | None = None,
    interface_language: str = "",
    account_id: int | None = None,
) -> RecordedVote:
    """A visitor's vote as the vote API and the battle socket take it: the proof-of-work
    challenge (``challenge_passed``: the session's mark, read fresh by the caller), the daily
    caps taken (``vote_caps_take``), then ``vote_record``; the caps are given back when the vote
    is not recorded, so a refused vote costs the visitor nothing of them. Nothing after the
    vote's commit raises here (its listeners are told robustly), so a recorded vote keeps them.

    Raises challenge_required (ARENA_CHALLENGE on, none solved), vote_cap, and what
    ``vote_record`` raises. The per-address rate limit is the caller's (django-ratelimit's
    group ``arena.vote_create``, on the request or the socket's address).
    """
    if settings.ARENA_CHALLENGE and not challenge_passed:
        raise challenge_required_error()
    counted = vote_caps_take(session_key=session_key, ip=ip)
    try:
        return vote_record(
            battle_id=battle_id,
            session_key=session_key,
            voter_id=voter_id,
            winner=winner,
            ip=ip,
            user_agent=user_agent,
            interface_language=interface_language,
            ran=ran,
            account_id=account_id,
        )
    except Exception:
        vote_caps_release(counted)
        raise


def vote_record(
    *,
    battle_id: object,
    session_key: str,
    voter_id: str,
    winner: object,
    ip: str | None = None,
    user_agent: str | None = None,
    interface_language: str = "",
    ran: object = None,
    account_id: int | None = None,
) -> RecordedVote:
    """Record the one vote a battle gets, from the session it was served to.

    The battle row is locked for the duration, so a double submission sees the first vote; the
    one-vote-per-battle constraint backs this up. The vote keeps the style counts of both sides,
    summed from those their answers got when saved, and downstream listeners hear of the vote
    only after commit. ``interface_language`` is the language the page was shown in (Django's
    active language), kept apart from the prompt's language. ``ran`` is the page's
    ``{"a": bool, "b": bool}``, which sides' code blocks the visitor ran: the vote is marked
    ``code_ran`` when both were and both answers hold a fenced code block. ``account_id`` is
    the account the visitor is signed in to (None without one): kept on the vote, it changes
    nothing else about it (voting needs no account).

    Five statements in the transaction: the battle locked (its models, whether it has a vote row
    and whether the voter accepted the terms read in the same statement), its messages, the
    vote's insert, the battle's update.
    """
    if not is_winner(winner):
        raise ArenaError(
            ErrorCode.INVALID,
            gettext("winner must be one of %(winners)s.") % {"winners": ", ".join(sorted(WINNERS))},
            field="winner",
        )
    ran_sides = _ran_sides(ran)
    pk = battle_pk(battle_id)
    # A live battle left streaming by a worker that is gone is settled first (it is then not
    # votable, and says so): the vote does not wait for the sweep to learn it.
    return settling_orphans(
        lambda: _vote_record(
            pk=pk,
            session_key=session_key,
            voter_id=voter_id,
            winner=winner,
            ip=ip,
            user_agent=user_agent,
            interface_language=interface_language[:INTERFACE_LANGUAGE_MAX],
            ran_sides=ran_sides,
            account_id=account_id,
        )
    )


def _vote_record(
    *,
    pk: uuid.UUID,
    session_key: str,
    voter_id: str,
    winner: Winner,
    ip: str | None,
    user_agent: str | None,
    interface_language: str,
    ran_sides: frozenset[str],
    account_id: int | None,
) -> RecordedVote:
    try:
        with transaction.atomic():
            locked = _battle_locked(pk=pk, voter_id=voter_id)
            # Another session's battle is as unknown as a missing one (as when it is read), so
            # the answer tells no one which ids exist.
            if locked is None or not session_hash_matches(locked.battle.session_hash, session_key):
                raise not_found(gettext("Battle"))
            battle = locked.battle
            if battle.state == Battle.State.VOTED or locked.has_vote:
                raise ArenaError(ErrorCode.ALREADY_VOTED, ALREADY_VOTED_MESSAGE, status=409)
            if battle.state == Battle.State.STREAMING:
                orphan_check(battle)
            if battle.state != Battle.State.READY:
                raise ArenaError(
                    ErrorCode.NOT_VOTABLE,
                    gettext("This battle cannot be voted on (it is %(state)s).")
                    % {"state": battle.get_state_display().lower()},
                    status=409,
                )
            if not locked.terms_accepted:
                raise ArenaError(
                    ErrorCode.TERMS_REQUIRED,
                    gettext("Accept the terms before voting."),
                    status=403,
                    field="terms",
                )
            messages = battle_current_messages(battle=battle)
            style = conv_metadata(
                [_answer_style(m) for m in messages if m.side == BattleMessage.Side.A],
                [_answer_style(m) for m in messages if m.side == BattleMessage.Side.B],
            )
            flags = _flags(battle=battle, user_agent=user_agent)
            # An answer that named its own model, checked when it was saved (arena.leaks).
            if any(m.names_model for m in messages):
                flags.append(IDENTITY_LEAK)
            vote = Vote(
                battle=battle,
                winner=winner,
                voter_id=voter_id,
                ip_hash=ip_hash(ip),
                user_agent_class=user_agent_class(user_agent),
                flagged=bool(flags),
                flags=flags,
                style=style,
                interface_language=interface_language,
                account_id=account_id,
                code_ran=ran_sides == BOTH_SIDES
                and all(
                    any(m.side == side and _has_code(m.content) for m in messages)
                    for side in (BattleMessage.Side.A, BattleMessage.Side.B)
                ),
            )
            rows.insert(vote, using=locked.using)
            battle.state = Battle.State.VOTED
            rows.update_fields([battle], ["state", "updated_at"], using=locked.using)
            send_after_commit(
                vote_recorded,
                sender=Vote,
                vote_id=vote.pk,
                battle_id=battle.pk,
                source=battle.source,
            )
    except IntegrityError:
        raise ArenaError(ErrorCode.ALREADY_VOTED, ALREADY_VOTED_MESSAGE, status=409) from None
    return RecordedVote(vote=vote, messages=messages)


_BATTLE = rows.Columns(Battle, "b")
_MODEL_A = rows.Columns(ArenaModel, "ma")
_MODEL_B = rows.Columns(ArenaModel, "mb")


def _battle_locked_sql(connection: BaseDatabaseWrapper) -> str:
    """The battle's row, locked (only its own, not its models' rows, which every vote on a
    battle of theirs reads), with its models, whether it has a vote row, whether the voter
    accepted the terms in force and its prompt's image count (the answer's image URLs are read
    only when the prompt has images): ``Battle.objects.select_for_update(of=("self",))
    .select_related("model_a", "model_b").annotate(has_vote=Exists(...),
    terms_accepted=Exists(...), prompt_image_count=...)`` as one statement written once."""
    names = rows.Names(connection)
    q, col = names.q, names.col
    battle, vote, terms, model = (
        names.table(m) for m in (Battle, Vote, TermsAcceptance, ArenaModel)
    )
    b, ma, mb = q("b"), q("ma"), q("mb")
    return (
        f"SELECT {_BATTLE.sql(connection)}, "  # noqa: S608  (names from the models' metadata)
        f"EXISTS(SELECT 1 FROM {vote} {q('v')} "
        f"WHERE {q('v')}.{col(Vote, 'battle')} = {b}.{col(Battle, 'id')}), "
        f"EXISTS(SELECT 1 FROM {terms} {q('t')} WHERE {q('t')}.{col(TermsAcceptance, 'voter_id')}"
        f" = %s AND {q('t')}.{col(TermsAcceptance, 'terms_version')} = %s), "
        f"{prompt_image_count_sql(names, 'b')}, "
        f"{_MODEL_A.sql(connection)}, {_MODEL_B.sql(connection)} "
        f"FROM {battle} {b} "
        f"INNER JOIN {model} {ma} ON {ma}.{col(ArenaModel, 'id')} = {b}.{col(Battle, 'model_a')} "
        f"INNER JOIN {model} {mb} ON {mb}.{col(ArenaModel, 'id')} = {b}.{col(Battle, 'model_b')} "
        f"WHERE {b}.{col(Battle, 'id')} = %s{rows.for_update_of(connection, 'b')}"
    )


@dataclass(frozen=True)
class _Locked:
    battle: Battle  # with its models, and ``prompt_image_count`` for its payload
    has_vote: bool
    terms_accepted: bool
    using: str


def _battle_locked(*, pk: uuid.UUID, voter_id: str) -> _Locked | None:
    """The battle locked for its vote (``_battle_locked_sql``); None if there is none."""
    using = router.db_for_write(Battle)
    connection = connections[using]
    sql = rows.built(connection, "vote.battle_locked", lambda: _battle_locked_sql(connection))
    pk_param = Battle._meta.get_field("id").get_db_prep_value(pk, connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, [voter_id, settings.ARENA_TERMS_VERSION, pk_param])
        row = cursor.fetchone()
    if row is None:
        return None
    battle: Battle = _BATTLE.load(connection, row)
    at = _BATTLE.width
    battle.prompt_image_count = row[at + 2]  # type: ignore[attr-defined]  # read by battle_payload
    models_at = at + 3
    rows.cache_related(battle, "model_a", _MODEL_A.load(connection, row, models_at))
    rows.cache_related(
        battle, "model_b", _MODEL_B.load(connection, row, models_at + _MODEL_A.width)
    )
    return _Locked(
        battle=battle, has_vote=bool(row[at]), terms_accepted=bool(row[at + 1]), using=using
    )


BOTH_SIDES = frozenset({"a", "b"})
# A fenced code block's opening line (CommonMark: three or more backticks or tildes).
_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.MULTILINE)


def _ran_sides(ran: object) -> frozenset[str]:
    """The sides the page says it ran code of; anything but ``{"a"?: bool, "b"?: bool}`` (or
    nothing) is refused, naming the field."""
    if ran is None:
        return frozenset()
    if not isinstance(ran, dict) or not all(
        key in BOTH_SIDES and isinstance(value, bool) for key, value in ran.items()
    ):
        raise ArenaError(
            ErrorCode.INVALID,
            gettext('ran must be an object such as {"a": true, "b": false}.'),
            field="ran",
        )
    return frozenset(key for key, value in ran.items() if value)


def _has_code(text: str) -> bool:
    return bool(_FENCE.search(text or ""))


def _answer_style(message: BattleMessage) -> AnswerStyle:
    """The answer's counts as saved; counted now for an answer saved before they were kept."""
    if message.style is None:
        return style_counts(message.content)
    return cast(AnswerStyle, message.style)


def _flags(*, battle: Battle, user_agent: str | None) -> list[str]:
    """Reasons to keep a vote out of the leaderboard while keeping it on record."""
    flags = []
    min_seconds = settings.ARENA_MIN_VOTE_SECONDS
    if min_seconds and timezone.now() - battle.updated_at < timedelta(seconds=min_seconds):
        flags.append("too_fast")
    if user_agent_class(user_agent) == "bot":
        flags.append("bot_user_agent")
    return flags
