"""The turns of a live battle: planned, then finished.

Why one module: a turn's plan and its finish share the battle's row lock, the refusals and the
message bookkeeping; live and mixed turns differ only in where an answer comes from, so they
stay side by side.

The services here do the bookkeeping around a turn; the streaming itself happens in the
websocket consumer (``arena.live.consumer``) through ``arena.live.upstream``. A turn is planned
(``battle_start_live``, ``battle_turn_add``, ``battle_regenerate``: the messages are created as
streaming, and the battle is streaming), then finished (``battle_turn_finish``: both answers are
saved and the battle becomes ready to vote, or errored/aborted, which are not votable).
"""

import random
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field
from django.utils import timezone
from django.utils.translation import gettext

from answer_style import AnswerStyle, style_counts
from arena import rows
from arena.errors import ArenaError, ErrorCode, not_found, still_streaming
from arena.identity import session_hash, session_hash_matches
from arena.inputs import text_storable
from arena.leaks import answer_names_model
from arena.live.breaker import provider_failure_record, provider_success_record
from arena.live.draw import draw_pair, named_pair
from arena.live.images import image_data_url, images_for_prompt, images_quota_give_back
from arena.live.limits import check_call_rate, check_concurrency, clean_prompt
from arena.live.moderation import prompt_moderate
from arena.live.owners import owners_mark
from arena.live.sweep import orphan_check, settling_orphans
from arena.live.upstream import Answer, UpstreamTarget
from arena.models import (
    USER_PROMPT_SOURCE,
    ArenaModel,
    Battle,
    BattleMessage,
    Prompt,
    PromptImage,
    Provider,
)
from arena.payloads import BattlePayload, Side
from arena.pool_cache import pool_cache
from arena.prompt_text import prompt_text_hash
from arena.selectors import (
    Limits,
    battle_current_messages,
    battle_payload,
    battle_payload_by_id,
    battle_pk,
    live_limits,
    prompt_image_count_sql,
)

SIDES: tuple[Side, Side] = ("a", "b")


@dataclass(frozen=True)
class SidePlan:
    message_id: int
    target: UpstreamTarget
    # OpenAI chat messages; a user turn with images has content parts instead of a string
    history: list[dict[str, Any]]


@dataclass(frozen=True)
class TurnPlan:
    """What the consumer needs to stream one turn, read from the database up front."""

    battle_id: uuid.UUID
    turn: int
    prompt: str
    regenerated: bool
    max_tokens: int
    sides: dict[Side, SidePlan]
    battle: BattlePayload  # battle_payload at the start of the turn (no names unless named)


def battle_start_live(
    *,
    session_key: str,
    prompt: object,
    mode: str = Battle.Mode.ANONYMOUS,
    model_slugs: object = None,
    rng: random.Random | None = None,
    client_ip: str | None = None,
    image_ids: object = None,
) -> TurnPlan:
    """Start a live battle on the visitor's prompt, with the images it uploaded (their ids).

    Anonymous mode draws two different available models by sampling weight and places them on
    sides A and B in random order; named mode takes the two the visitor picked, in that order.
    With images, both are vision-capable models, and the images pass moderation with the text.
    """
    if not session_key:
        raise ArenaError(ErrorCode.NO_SESSION, gettext("Open the battle page first."), status=403)
    # The models and limits as this process keeps them (arena.pool_cache: one cache round trip).
    kept = pool_cache()
    limits = kept.live_limits()
    text = clean_prompt(prompt, limits)
    check_call_rate(client_ip)  # counted first, so a refused prompt costs a call too
    images = images_for_prompt(image_ids=image_ids, session_key=session_key)
    image_urls = [image_data_url(image) for image in images]
    prompt_moderate(text=text, session_key=session_key, client_ip=client_ip, image_urls=image_urls)
    if mode not in Battle.Mode.values:
        raise ArenaError(ErrorCode.INVALID, gettext("Unknown battle mode."), field="mode")
    vision = bool(images)
    if mode == Battle.Mode.NAMED:
        model_a, model_b = named_pair(model_slugs, kept, vision=vision)
    else:
        model_a, model_b = draw_pair(rng or random.SystemRandom(), kept, vision=vision)
    using = router.db_for_write(Battle)
    with transaction.atomic(using=using):
        check_concurrency(session_key=session_key, limits=limits, exclude=None)
        # Written as save() writes them (arena.rows: the same fields, defaults and signals),
        # by statements built once rather than by the ORM's query building for every battle.
        prompt = Prompt(
            turns=[text],
            source=USER_PROMPT_SOURCE,
            text_hash=prompt_text_hash(text),
            image_count=len(images),
        )
        rows.insert(prompt, using=using)
        battle = Battle(
            mode=mode,
            source=Battle.Source.LIVE,
            model_a=model_a,
            model_b=model_b,
            prompt=prompt,
            session_hash=session_hash(session_key),
            state=Battle.State.STREAMING,
        )
        rows.insert(battle, using=using)
        if images:
            _images_attach(battle=battle, images=images)
        return _plan_turn(
            battle=battle,
            turn=0,
            text=text,
            limits=limits,
            regenerated=False,
            new_battle=True,
            image_urls=image_urls,
        )


def _images_attach(*, battle: Battle, images: list[PromptImage]) -> None:
    """Give the images to the battle, in order; one taken by another battle meanwhile (the
    same ids sent twice at once) refuses this one."""
    for position, image in enumerate(images):
        taken = PromptImage.objects.filter(
            pk=image.pk, battle__isnull=True, prompt__isnull=True
        ).update(battle=battle, prompt=battle.prompt_id, position=position)
        if not taken:
            raise ArenaError(
                ErrorCode.INVALID,
                gettext("An image was sent with another prompt already; attach it again."),
                field="images",
            )
    # Taken, the images no longer count against their uploader's quotas of unattached bytes.
    transaction.on_commit(
        partial(images_quota_give_back, images),
        using=router.db_for_write(PromptImage),
        robust=True,
    )


def user_message(text: str, image_urls: list[str]) -> dict[str, Any]:
    """A user turn as an OpenAI chat message: plain text, or with images its content parts
    (the text first, then each image as an ``image_url`` part holding a data URL)."""
    if not image_urls:
        return {"role": "user", "content": text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    return {"role": "user", "content": parts}


def _locked_battle(
    *, battle_id: object, session_key: str, source: str = Battle.Source.LIVE
) -> Battle:
    pk = battle_pk(battle_id)
    battle = (
        Battle.objects.select_for_update(of=("self",))
        .select_related("model_a__provider", "model_b__provider", "prompt")
        .filter(pk=pk, source=source)
        .first()
    )
    if battle is None or not session_hash_matches(battle.session_hash, session_key):
        # another session's battle is as good as unknown to this one
        raise not_found(gettext("Battle"))
    return battle


def _refuse_while_streaming(battle: Battle) -> None:
    """``still_streaming`` for a battle whose turn streams in a live process; a battle left
    streaming by a process that is gone (a killed worker) is settled first."""
    if battle.state == Battle.State.STREAMING:
        orphan_check(battle)
        raise still_streaming()


def _refuse_unless_ready(battle: Battle, action: str) -> None:
    _refuse_while_streaming(battle)
    if battle.state == Battle.State.READY:
        return
    if battle.state == Battle.State.VOTED:
        raise ArenaError(
            ErrorCode.ALREADY_VOTED,
            gettext("This battle has a vote; start a new battle to %(action)s.")
            % {"action": action},
            status=409,
        )
    raise ArenaError(
        ErrorCode.NOT_CONTINUABLE,
        gettext(
            "An answer in this battle failed or was stopped, so it cannot go on; "
            "regenerate the answers or start a new battle."
        ),
        status=409,
    )


def battle_turn_add(
    *,
    battle_id: object,
    session_key: str,
    prompt: object,
    client_ip: str | None = None,
    image_ids: object = None,
) -> TurnPlan:
    """Add a follow-up prompt: the same pair answers it with the whole conversation (and the
    first turn's images, if any; a follow-up brings no new ones)."""
    if image_ids:
        raise ArenaError(
            ErrorCode.INVALID,
            gettext("Images go with a battle's first prompt; start a new battle."),
            field="images",
        )
    limits = live_limits()
    text = clean_prompt(prompt, limits)
    check_call_rate(client_ip)  # counted first, so a refused prompt costs a call too
    prompt_moderate(text=text, session_key=session_key, client_ip=client_ip)
    return settling_orphans(
        lambda: _turn_add(battle_id=battle_id, session_key=session_key, text=text, limits=limits)
    )


def _turn_add(*, battle_id: object, session_key: str, text: str, limits: Limits) -> TurnPlan:
    with transaction.atomic():
        battle = _locked_battle(battle_id=battle_id, session_key=session_key)
        _refuse_unless_ready(battle, gettext("ask more"))
        assert battle.prompt is not None
        turns = list(battle.prompt.turns)
        if len(turns) >= limits.max_turns:
            raise ArenaError(
                ErrorCode.TURN_LIMIT,
                gettext("A battle has at most %(turns)s turns; vote, or start a new battle.")
                % {"turns": limits.max_turns},
                status=409,
            )
        check_concurrency(session_key=session_key, limits=limits, exclude=battle.pk)
        battle.prompt.turns = [*turns, text]
        battle.prompt.save(update_fields=["turns"])
        battle.state = Battle.State.STREAMING
        battle.save(update_fields=["state", "updated_at"])
        return _plan_turn(
            battle=battle, turn=len(turns), text=text, limits=limits, regenerated=False
        )


def battle_regenerate(
    *, battle_id: object, session_key: str, client_ip: str | None = None
) -> TurnPlan:
    """Replace the last turn's answers with new ones from the same pair.

    Allowed before the vote, once the turn has ended (done, failed or stopped). The replaced
    answers stay on record, marked superseded.
    """
    limits = live_limits()
    check_call_rate(client_ip)
    return settling_orphans(
        lambda: _regenerate(battle_id=battle_id, session_key=session_key, limits=limits)
    )


def _regenerate(*, battle_id: object, session_key: str, limits: Limits) -> TurnPlan:
    with transaction.atomic():
        battle = _locked_battle(battle_id=battle_id, session_key=session_key)
        if battle.state == Battle.State.VOTED:
            raise ArenaError(
                ErrorCode.ALREADY_VOTED,
                gettext("Answers cannot be regenerated after the vote."),
                status=409,
            )
        _refuse_while_streaming(battle)
        check_concurrency(session_key=session_key, limits=limits, exclude=battle.pk)
        current = list(battle.messages.filter(superseded_at__isnull=True).order_by("-turn"))
        if not current:
            raise ArenaError(ErrorCode.INVALID, gettext("Nothing to regenerate yet."))
        turn = current[0].turn
        text = current[0].user_content
        battle.messages.filter(turn=turn, superseded_at__isnull=True).update(
            superseded_at=timezone.now()
        )
        battle.state = Battle.State.STREAMING
        battle.save(update_fields=["state", "updated_at"])
        return _plan_turn(battle=battle, turn=turn, text=text, limits=limits, regenerated=True)


def battle_mixed_stream(
    *, battle_id: object, session_key: str, client_ip: str | None = None
) -> TurnPlan:
    """Stream the live side of a mixed battle (``arena.services.bridge``): its next pool user
    turn, with its own earlier answers in the conversation, or again the turn whose live
    answer failed or was stopped (that answer stays on record, superseded).

    The stored side's answers are saved already; the battle is ready to vote once the live side
    has answered every turn. The call rate, moderation (of the pool's user turn), concurrency,
    breaker, turn-end and settle-on-disconnect paths are the live battle's.
    """
    limits = live_limits()
    check_call_rate(client_ip)
    text = _mixed_next_text(battle_id=battle_id, session_key=session_key)
    if text is not None:
        prompt_moderate(text=text, session_key=session_key, client_ip=client_ip)
    return settling_orphans(
        lambda: _mixed_stream(battle_id=battle_id, session_key=session_key, limits=limits)
    )


def _mixed_turns(battle: Battle) -> tuple[list[BattleMessage], list[BattleMessage]]:
    """A mixed battle's current messages: the live side's and the stored side's, by turn."""
    current = battle_current_messages(battle=battle)
    live = [m for m in current if m.side == battle.live_side]
    stored = [m for m in current if m.side != battle.live_side]
    return live, stored


def _mixed_next_turn(live: list[BattleMessage]) -> int:
    """The turn the live side answers next: the first one it has no finished answer to."""
    done = {m.turn for m in live if m.status == BattleMessage.Status.DONE}
    turn = 0
    while turn in done:
        turn += 1
    return turn


def _mixed_next_text(*, battle_id: object, session_key: str) -> str | None:
    """The user turn a mixed battle's live side answers next (read without a lock, for the
    moderation check before the battle is locked); None when there is none to answer."""
    battle = (
        Battle.objects.filter(pk=battle_pk(battle_id), source=Battle.Source.MIXED)
        .only("id", "session_hash", "live_side")
        .first()
    )
    if battle is None or not session_hash_matches(battle.session_hash, session_key):
        raise not_found(gettext("Battle"))
    live, stored = _mixed_turns(battle)
    turn = _mixed_next_turn(live)
    return next((m.user_content for m in stored if m.turn == turn), None)


def _mixed_stream(*, battle_id: object, session_key: str, limits: Limits) -> TurnPlan:
    with transaction.atomic():
        battle = _locked_battle(
            battle_id=battle_id, session_key=session_key, source=Battle.Source.MIXED
        )
        if battle.state == Battle.State.VOTED:
            raise ArenaError(
                ErrorCode.ALREADY_VOTED,
                gettext("This battle has a vote; start a new battle."),
                status=409,
            )
        live, stored = _mixed_turns(battle)
        if any(m.status == BattleMessage.Status.STREAMING for m in live):
            _refuse_while_streaming(battle)
        turn = _mixed_next_turn(live)
        user_turn = next((m for m in stored if m.turn == turn), None)
        if user_turn is None or battle.state == Battle.State.READY:
            raise ArenaError(
                ErrorCode.NOT_CONTINUABLE,
                gettext("Both sides have answered every turn; vote, or start a new battle."),
                status=409,
            )
        check_concurrency(session_key=session_key, limits=limits, exclude=battle.pk)
        retried = [m.pk for m in live if m.turn == turn]
        if retried:  # a failed or stopped answer to this turn: kept on record, superseded
            BattleMessage.objects.filter(pk__in=retried).update(superseded_at=timezone.now())
        battle.state = Battle.State.STREAMING
        battle.save(update_fields=["state", "updated_at"])
        return _plan_turn(
            battle=battle,
            turn=turn,
            text=user_turn.user_content,
            limits=limits,
            regenerated=bool(retried),
            sides_planned=(cast(Side, battle.live_side),),
        )


def _plan_turn(
    *,
    battle: Battle,
    turn: int,
    text: str,
    limits: Limits,
    regenerated: bool,
    new_battle: bool = False,
    sides_planned: tuple[Side, ...] = SIDES,
    image_urls: list[str] | None = None,
) -> TurnPlan:
    """Create the streaming messages of a turn for ``sides_planned`` (both, or a mixed
    battle's live side) and what the consumer needs to stream them.

    The first turn's images (``image_urls`` for a new battle, else read from its images when
    its prompt has any) go with that turn each time the conversation is sent."""
    if image_urls is None:
        image_urls = []
        if battle.prompt is not None and battle.prompt.image_count:
            image_urls = [image_data_url(i) for i in battle.prompt.images.order_by("position")]
    earlier: dict[str, list[BattleMessage]] = {side: [] for side in SIDES}
    if not new_battle:  # a battle created just now has no earlier messages to read
        for message in battle.messages.filter(superseded_at__isnull=True, turn__lt=turn).order_by(
            "turn"
        ):
            earlier[message.side].append(message)
    # Both messages in one INSERT (bulk_create's); PostgreSQL and SQLite (3.35+) return their
    # keys.
    messages = [
        BattleMessage(
            battle=battle,
            side=side,
            turn=turn,
            user_content=text,
            content="",
            status=BattleMessage.Status.STREAMING,
        )
        for side in sides_planned
    ]
    rows.bulk_insert(messages, using=battle._state.db or DEFAULT_DB_ALIAS)
    # Marked as this process's before the turn's transaction commits: no request finds the
    # battle streaming without a live owner (arena.live.owners).
    owners_mark([battle.pk])
    sides: dict[Side, SidePlan] = {}
    models = {"a": battle.model_a, "b": battle.model_b}
    for side, message in zip(sides_planned, messages, strict=True):
        model = models[side]
        history: list[dict[str, Any]] = []
        for earlier_message in earlier[side]:
            urls = image_urls if earlier_message.turn == 0 else []
            history.append(user_message(earlier_message.user_content, urls))
            history.append({"role": "assistant", "content": earlier_message.content})
        history.append(user_message(text, image_urls if turn == 0 else []))
        assert message.pk is not None
        sides[side] = SidePlan(
            message_id=message.pk, target=UpstreamTarget.for_model(model), history=history
        )
    return TurnPlan(
        battle_id=battle.pk,
        turn=turn,
        prompt=text,
        regenerated=regenerated,
        max_tokens=limits.max_output_tokens,
        sides=sides,
        # A battle created just now has only these messages and no vote: nothing to read back.
        battle=battle_payload(battle=battle, new_messages=messages if new_battle else None),
    )


def _message_column(name: str) -> str:
    field = BattleMessage._meta.get_field(name)
    assert isinstance(field, Field) and field.column
    return connection.ops.quote_name(field.column)


def messages_progress(*, contents: dict[int, str]) -> None:
    """Save the partial texts of answers still streaming (message id -> text), in one commit.

    One UPDATE statement run for every message: the consumer saves all the streaming answers
    of its process at once, hundreds of rows, and the ORM's query building per row would hold
    the GIL against the token relay for that long.
    """
    if not contents:
        return
    # Identifiers come from the model's metadata; values go as parameters.
    table = connection.ops.quote_name(BattleMessage._meta.db_table)
    pk, content, status = (_message_column(name) for name in ("id", "content", "status"))
    sql = f"UPDATE {table} SET {content} = %s WHERE {pk} = %s AND {status} = %s"  # noqa: S608
    streaming = BattleMessage.Status.STREAMING.value
    rows = [(text, message_id, streaming) for message_id, text in contents.items()]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)


_FINISHED_FIELDS = [
    "content",
    "style",
    "names_model",
    "status",
    "token_count",
    "prompt_tokens",
    "time_to_first_token_ms",
    "latency_ms",
    "finish_reason",
    "error",
]


def message_settle(
    message: BattleMessage,
    *,
    own_model: ArenaModel,
    answer: Answer,
    style: AnswerStyle | None,
    save: bool = True,
) -> None:
    """Save an answer as it ended into its message (read already, with its battle's models);
    ``save=False`` only sets the fields, for the caller to save them with others'."""
    status = {
        "done": BattleMessage.Status.DONE,
        "error": BattleMessage.Status.ERROR,
        "aborted": BattleMessage.Status.ABORTED,
    }.get(answer.status, BattleMessage.Status.ABORTED)  # still streaming when the turn ended
    message.content = answer.text
    message.style = style if style is not None else style_counts(answer.text)
    # The user's turn of this answer is what it may repeat a name from (arena.leaks).
    message.names_model = answer_names_model(
        answer.text, model=own_model, user_turns=[message.user_content]
    )
    message.status = status
    message.token_count = answer.completion_tokens
    message.prompt_tokens = answer.prompt_tokens
    message.time_to_first_token_ms = answer.time_to_first_token_ms
    message.latency_ms = answer.latency_ms
    message.finish_reason = answer.finish_reason if status == BattleMessage.Status.DONE else ""
    error = text_storable(answer.error)  # an upstream's words may hold anything
    message.error = error or ("aborted" if status == BattleMessage.Status.ABORTED else "")
    # Only what the end of an answer changes: not the prompt's text again, nor the keys.
    if save:
        message.save(update_fields=_FINISHED_FIELDS)


def _turn_settle(
    *, battle_id: uuid.UUID, answers: dict[Side, tuple[int, Answer]]
) -> tuple[Battle, list[BattleMessage] | None]:
    """``battle_turn_finish``, with the battle's current messages as saved (None when the turn
    was settled before this call and nothing was saved)."""
    # Counted before the battle's row is locked: the first count in a process loads the
    # tokenizer (about 0.4 s), which no lock should wait for.
    styles = {message_id: style_counts(answer.text) for message_id, answer in answers.values()}
    with transaction.atomic():
        # The models come along for the leak check and their providers for the breakers
        # below; only the battle's row is locked.
        battle = _battle_locked_for_finish(battle_id)
        if battle.state != Battle.State.STREAMING:
            return battle, None
        # All the current messages in one read: this turn's (still streaming unless settled or
        # regenerated since) and the earlier turns' (for the page's payload).
        current = battle_current_messages(battle=battle)
        by_id = {m.pk: m for m in current}
        unsettled = [
            by_id[message_id]
            for message_id, _ in answers.values()
            if message_id in by_id and by_id[message_id].status == BattleMessage.Status.STREAMING
        ]
        if len(unsettled) != len(answers):
            return battle, None
        statuses = set()
        for side, (message_id, answer) in answers.items():
            own_model = battle.model_a if side == "a" else battle.model_b
            message = by_id[message_id]
            message_settle(
                message, own_model=own_model, answer=answer, style=styles[message_id], save=False
            )
            statuses.add(message.status)
        # Both answers in one statement run for each (message_settle's fields).
        rows.update_fields(unsettled, _FINISHED_FIELDS, using=battle._state.db or DEFAULT_DB_ALIAS)
        if BattleMessage.Status.ERROR in statuses:
            battle.state = Battle.State.ERRORED
        elif statuses == {BattleMessage.Status.DONE}:
            battle.state = (
                Battle.State.STREAMING if _mixed_turns_left(battle, current) else Battle.State.READY
            )
        else:
            battle.state = Battle.State.ABORTED
        rows.update_fields(
            [battle], ["state", "updated_at"], using=battle._state.db or DEFAULT_DB_ALIAS
        )
    for side, (_, answer) in answers.items():
        provider = (battle.model_a if side == "a" else battle.model_b).provider
        if provider is None:
            continue
        if answer.provider_failed:
            provider_failure_record(provider_id=provider.pk)
        elif answer.status == "done" and (
            provider.breaker_failures or provider.breaker_open_until is not None
        ):
            # A closed breaker with no failures (as read with the battle) needs no write: one
            # UPDATE per answer saved, nearly always of nothing, otherwise.
            provider_success_record(provider_id=provider.pk)
    return battle, current


_BATTLE = rows.Columns(Battle, "b")
_MODEL_A = rows.Columns(ArenaModel, "ma")
_PROVIDER_A = rows.Columns(Provider, "pa")
_MODEL_B = rows.Columns(ArenaModel, "mb")
_PROVIDER_B = rows.Columns(Provider, "pb")


def _battle_locked_for_finish_sql(connection: BaseDatabaseWrapper) -> str:
    """``Battle.objects.select_related("model_a__provider", "model_b__provider")
    .select_for_update(of=("self",)).annotate(prompt_image_count=...)``, by its key, as one
    statement written once: the models come along for the leak check and their providers for
    the breakers; only the battle's row is locked."""
    names = rows.Names(connection)
    q, col = names.q, names.col
    battle, model, provider = (names.table(m) for m in (Battle, ArenaModel, Provider))
    b = q("b")
    joins = []
    for m, pv, side in (("ma", "pa", "model_a"), ("mb", "pb", "model_b")):
        joins.append(
            f"INNER JOIN {model} {q(m)} ON {q(m)}.{col(ArenaModel, 'id')} = {b}.{col(Battle, side)} "
            f"LEFT OUTER JOIN {provider} {q(pv)} "
            f"ON {q(pv)}.{col(Provider, 'id')} = {q(m)}.{col(ArenaModel, 'provider')}"
        )
    columns = ", ".join(c.sql(connection) for c in (_MODEL_A, _PROVIDER_A, _MODEL_B, _PROVIDER_B))
    return (
        f"SELECT {_BATTLE.sql(connection)}, "  # noqa: S608  (names from the models' metadata)
        f"{prompt_image_count_sql(names, 'b')}, {columns} "
        f"FROM {battle} {b} {' '.join(joins)} "
        f"WHERE {b}.{col(Battle, 'id')} = %s{rows.for_update_of(connection, 'b')}"
    )


def _battle_locked_for_finish(battle_id: uuid.UUID) -> Battle:
    """The battle whose turn ends, locked, with its models and their providers and its prompt's
    ``prompt_image_count``; ``Battle.DoesNotExist`` if there is none."""
    connection = connections[router.db_for_write(Battle)]
    sql = rows.built(
        connection, "turns.battle_locked", lambda: _battle_locked_for_finish_sql(connection)
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [Battle._meta.get_field("id").get_db_prep_value(battle_id, connection)])
        row = cursor.fetchone()
    if row is None:
        raise Battle.DoesNotExist("Battle matching query does not exist.")
    battle: Battle = _BATTLE.load(connection, row)
    at = _BATTLE.width
    battle.prompt_image_count = row[at]  # type: ignore[attr-defined]
    at += 1
    for side, model_columns, provider_columns in (
        ("model_a", _MODEL_A, _PROVIDER_A),
        ("model_b", _MODEL_B, _PROVIDER_B),
    ):
        model = model_columns.load(connection, row, at)
        at += model_columns.width
        provider = None
        if model.provider_id is not None:
            provider = provider_columns.load(connection, row, at)
        at += provider_columns.width
        rows.cache_related(model, "provider", provider)
        rows.cache_related(battle, side, model)
    return battle


def _mixed_turns_left(battle: Battle, current: list[BattleMessage]) -> bool:
    """Whether a mixed battle's live side still has user turns to answer (the battle then stays
    streaming, unvotable, and the page asks for the next turn at once); False for any other."""
    if battle.source != Battle.Source.MIXED:
        return False
    done = BattleMessage.Status.DONE
    live_done = {m.turn for m in current if m.side == battle.live_side and m.status == done}
    return any(m.turn not in live_done for m in current if m.side != battle.live_side)


def battle_turn_finish(
    *, battle_id: uuid.UUID, answers: dict[Side, tuple[int, Answer]]
) -> BattlePayload:
    """Save both answers of a turn and settle the battle's state.

    Ready to vote when both are done; errored when either failed; aborted when either was
    stopped or cut off by a disconnect. Each provider's breaker hears of its answer.

    Idempotent: a turn already settled (by an earlier call whose reply was lost with the
    database connection, or by ``live_battles_sweep``) or whose answers were regenerated since
    is left as it is, so a save retried after a database outage never undoes later changes.

    Returns the battle as the page is shown it, built from what was just saved (the battle was
    streaming, so it has no vote yet) instead of read back; read back only when the turn had
    been settled before.
    """
    battle, current = _turn_settle(battle_id=battle_id, answers=answers)
    if current is None:
        return battle_payload_by_id(battle_id=battle_id)
    return battle_payload(battle=battle, new_messages=current)
