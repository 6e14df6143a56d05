"""Reads. Everything a view or a downstream app needs to know about battles and votes.

Why one module: the vote filters (the deduplication, the repeated-prompt cap, the source cap)
compose into the vote reads the ratings side and the exports share, and must stay one query
shape for all of them; the battle reads beside them are the views' and the live battle's.
"""

import secrets
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Coalesce, Concat, Length, RowNumber
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext

from arena import rows
from arena.code_tasks import CODE_TASKS, SUGGESTION_CATEGORIES
from arena.errors import not_found
from arena.identity import session_hash
from arena.models import (
    USER_PROMPT_SOURCE,
    ArenaModel,
    Battle,
    BattleMessage,
    Completion,
    LiveLimits,
    Prompt,
    PromptImage,
    Provider,
    Reaction,
    ReactionTag,
    TermsAcceptance,
    Vote,
)
from arena.payloads import (
    BattleMode,
    BattlePayload,
    BattleSource,
    BattleState,
    LiveModel,
    MessageStatus,
    ModelPublic,
    Side,
    Turn,
    Winner,
)


def battle_pk(battle_id: object) -> uuid.UUID:
    """A battle id from a URL or a frame; anything that is not a UUID is an unknown battle."""
    try:
        return uuid.UUID(str(battle_id))
    except ValueError:
        raise not_found(gettext("Battle")) from None


def battle_for_session(*, battle_id: object, session_key: str) -> Battle:
    """The battle, if it was served to this session; another session's is as good as unknown.

    Battles keep the session's keyed hash (``session_hash``), never the key.
    """
    pk = battle_pk(battle_id)
    if not session_key:
        raise not_found(gettext("Battle"))
    battle = (
        Battle.objects.select_related("model_a", "model_b")
        .filter(pk=pk, session_hash=session_hash(session_key))
        .first()
    )
    if battle is None:
        raise not_found(gettext("Battle"))
    return battle


def terms_accepted(*, voter_id: str) -> bool:
    return TermsAcceptance.objects.filter(
        voter_id=voter_id, terms_version=settings.ARENA_TERMS_VERSION
    ).exists()


def pool_available() -> bool:
    """Whether a pool battle can be served: some prompt has pool answers from two active models
    with a positive sampling weight (what ``battle_start_pool`` draws from)."""
    return (
        Completion.objects.filter(
            source=Completion.Source.POOL, model__is_active=True, model__sampling_weight__gt=0
        )
        .values("prompt_id")
        .annotate(models=Count("model_id", distinct=True))
        .filter(models__gte=2)
        .exists()
    )


_MESSAGE = rows.Columns(BattleMessage, "m")


def _current_messages_sql(connection: BaseDatabaseWrapper) -> str:
    def col(name: str) -> str:
        return f"{rows.quote(connection, 'm')}.{rows.column(connection, BattleMessage, name)}"

    return (
        f"SELECT {_MESSAGE.sql(connection)} "  # noqa: S608  (names from the models' metadata)
        f"FROM {rows.table(connection, BattleMessage)} {rows.quote(connection, 'm')} "
        f"WHERE {col('battle')} = %s AND {col('superseded_at')} IS NULL "
        f"ORDER BY {col('turn')} ASC, {col('side')} ASC"
    )


def battle_current_messages(*, battle: Battle) -> list[BattleMessage]:
    """The battle's messages not superseded, by turn and side, each with its ``battle`` cached:
    ``battle.messages.filter(superseded_at__isnull=True).order_by("turn", "side")``, read by a
    statement written once (``arena.rows``: every live battle's turn end and vote read them)."""
    using = battle._state.db or router.db_for_read(BattleMessage, instance=battle)
    connection = connections[using]
    sql = rows.built(
        connection, "battle_current_messages", lambda: _current_messages_sql(connection)
    )
    battle_key = Battle._meta.get_field("id").get_db_prep_value(battle.pk, connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, [battle_key])
        found = cursor.fetchall()
    messages = []
    for row in found:
        message: BattleMessage = _MESSAGE.load(connection, row)
        rows.cache_related(message, "battle", battle)
        messages.append(message)
    return messages


def model_public_dict(model: ArenaModel) -> ModelPublic:
    return {
        "slug": model.slug,
        "name": model.display_name,
        "organization": model.organization,
        "license": model.license,
    }


def battle_payload(
    *,
    battle: Battle,
    new_messages: list[BattleMessage] | None = None,
    vote: Vote | None = None,
    image_ids: Sequence[uuid.UUID] | None = None,
) -> BattlePayload:
    """What a client is shown of a battle.

    Model identities are included only once the battle is voted on, or in named mode where the
    visitor chose the models; nothing else in the payload can identify a model.

    ``new_messages``: the battle's current messages, in memory already (a battle created or
    voted on in this request); then neither its messages nor its vote are read back: the vote
    is ``vote`` (None for a battle just created). ``image_ids``: the ids of the prompt's
    images, when known without a read (a pool battle's, from the process's copies).

    The choice columns are read as the ``Literal``s of ``arena.payloads`` (their choices are
    the same values; the casts say so to the type checker, nothing is converted).
    """
    turns: dict[int, Turn] = {}
    if new_messages is None:
        messages = battle_current_messages(battle=battle)
    else:
        messages = sorted(new_messages, key=lambda m: (m.turn, m.side))
    for message in messages:
        turn = turns.setdefault(message.turn, {"index": message.turn, "prompt": ""})
        turn["prompt"] = message.user_content
        turn[cast(Side, message.side)] = {
            "content": message.content,
            "status": cast(MessageStatus, message.status),
            "error": bool(message.error),
        }
    if new_messages is None:
        vote = Vote.objects.filter(battle=battle).only("winner").first()
    payload: BattlePayload = {
        "id": str(battle.id),
        "mode": cast(BattleMode, battle.mode),
        # An environment battle is served in place of a pool battle and looks like one.
        "source": "pool"
        if battle.source == Battle.Source.ENV
        else cast(BattleSource, battle.source),
        "state": cast(BattleState, battle.state),
        "votable": battle.state == Battle.State.READY,
        "turns": [turns[k] for k in sorted(turns)],
        "images": _prompt_image_urls(battle, image_ids),
        "vote": {"winner": cast(Winner, vote.winner)} if vote else None,
        "models": None,
    }
    if vote is not None or battle.mode == Battle.Mode.NAMED:
        payload["models"] = {
            "a": model_public_dict(battle.model_a),
            "b": model_public_dict(battle.model_b),
        }
    return payload


def prompt_image_count() -> Subquery:
    """The battle's prompt's ``image_count``, for ``annotate(prompt_image_count=...)`` on a read
    of battles whose payload is built next: ``battle_payload`` then reads the images' ids only
    when there are some."""
    return Subquery(Prompt.objects.filter(pk=OuterRef("prompt_id")).values("image_count")[:1])


def prompt_image_count_sql(names: rows.Names, battle_alias: str) -> str:
    """``prompt_image_count()`` in SQL, for a statement written once (``arena.rows``) that reads
    the battle under ``battle_alias``."""
    p, b, prompt = names.q("p"), names.q(battle_alias), names.table(Prompt)
    return (
        f"(SELECT {p}.{names.col(Prompt, 'image_count')} FROM {prompt} {p} "  # noqa: S608
        f"WHERE {p}.{names.col(Prompt, 'id')} = {b}.{names.col(Battle, 'prompt')})"
    )


def _prompt_image_urls(battle: Battle, image_ids: Sequence[uuid.UUID] | None) -> list[str]:
    """The URLs of the battle's prompt's images, in order. No query when the ids are given,
    or the prompt is known to have none: in memory, or its ``image_count`` annotated on the
    battle (``prompt_image_count``, as the vote's locked read does)."""
    if battle.prompt_id is None:
        return []
    if image_ids is None:
        count: int | None
        if Battle.prompt.is_cached(battle):
            count = battle.prompt.image_count if battle.prompt else 0
        else:
            count = getattr(battle, "prompt_image_count", None)
        if count == 0:
            return []
        ids = PromptImage.objects.filter(prompt_id=battle.prompt_id).order_by("position")
        image_ids = list(ids.values_list("pk", flat=True))
    return [reverse("arena:prompt-image", args=[pk]) for pk in image_ids]


def battle_payload_by_id(*, battle_id: uuid.UUID) -> BattlePayload:
    """``battle_payload`` of a battle known to exist (just voted on, or a turn just saved)."""
    battle = Battle.objects.select_related("model_a", "model_b").get(pk=battle_id)
    return battle_payload(battle=battle)


def _votes_rated(*, anonymous_only: bool, include_flagged: bool) -> QuerySet[Vote]:
    # Environment battles judge a trainer's completions; they never enter the leaderboard.
    qs = Vote.objects.exclude(battle__source=Battle.Source.ENV)
    if anonymous_only:
        qs = qs.filter(battle__mode=Battle.Mode.ANONYMOUS)
    if not include_flagged:
        qs = qs.filter(flagged=False)
    return qs


def _votes_deduplicated(
    *, anonymous_only: bool, include_flagged: bool, duplicate_cap: int
) -> QuerySet[Vote]:
    """``_votes_rated`` without the repeated prompts' copies past ``duplicate_cap`` (0: none
    left out): the votes the per-source bound is counted among."""
    votes = _votes_rated(anonymous_only=anonymous_only, include_flagged=include_flagged)
    if duplicate_cap > 0:
        votes = votes.exclude(id__in=_repeated_prompt_votes(votes, cap=duplicate_cap))
    return votes


def _repeated_prompt_votes(votes: QuerySet[Vote], *, cap: int) -> QuerySet[Any, Any]:
    """The votes of ``votes`` past the first ``cap`` (by vote id) of their visitor's prompt.

    Votes are grouped by ``Prompt.text_hash`` (the normalised first turn, ``arena.prompt_text``),
    which only visitors' prompts carry: pool prompts are curated and never down-sampled. One
    ``row_number()`` window computed by the database, on PostgreSQL and SQLite alike.
    """
    return (
        _visitor_prompt_votes(votes)
        .annotate(
            copy=Window(
                RowNumber(), partition_by=F("battle__prompt__text_hash"), order_by=F("id").asc()
            )
        )
        .filter(copy__gt=cap)
        .values("id")
    )


def _visitor_prompt_votes(votes: QuerySet[Vote]) -> QuerySet[Vote]:
    """The votes of ``votes`` on visitors' prompts (those with a ``text_hash``), unordered."""
    return votes.filter(battle__prompt__text_hash__gt="").order_by()


@dataclass(frozen=True)
class RepeatedPrompts:
    """Votes ``votes_for_rating`` leaves out for their prompt's copies past the cap."""

    votes: int  # votes left out: every capped prompt's copies past the cap
    prompts: int  # visitors' prompts (normalised) with more rated votes than the cap


def repeated_prompt_counts(
    *, cap: int, anonymous_only: bool = True, include_flagged: bool = False
) -> RepeatedPrompts:
    """What ``votes_for_rating(duplicate_cap=cap, ...)`` leaves out for repeated prompts.

    One grouped query: the prompts with more than ``cap`` votes among the otherwise rated ones.
    """
    if cap <= 0:
        return RepeatedPrompts(votes=0, prompts=0)
    votes = _votes_rated(anonymous_only=anonymous_only, include_flagged=include_flagged)
    over = (
        _visitor_prompt_votes(votes)
        .values("battle__prompt__text_hash")
        .annotate(n=Count("id"))
        .filter(n__gt=cap)
        .values_list("n", flat=True)
    )
    copies = list(over)
    return RepeatedPrompts(votes=sum(n - cap for n in copies), prompts=len(copies))


@dataclass(frozen=True)
class SourceCap:
    """How far one source's votes count on a model: at most ``max(min_votes, share * n)``,
    ``n`` the model's votes from every other source; ``share`` 0 switches the cap off."""

    min_votes: int = 0
    share: float = 0.0

    @property
    def on(self) -> bool:
        return self.share > 0


def _source_capped_votes(votes: QuerySet[Vote], *, cap: SourceCap) -> RawSQL:
    """The ids of ``votes`` past their source's cap on one of their two models (``SourceCap``).

    A vote's source is its address hash, or its session (voter id) where no address was kept:
    the sessions of one address are one source. For each model, a source's votes on it (either
    side) are numbered by vote id; those numbered past ``max(min_votes, share * n)`` are left
    out, ``n`` the model's votes from the other sources among ``votes``. Two window functions
    over both sides of every vote, computed by the database (PostgreSQL and SQLite alike).
    """
    inner, params = (
        votes.order_by()
        .annotate(side_a=F("battle__model_a_id"), side_b=F("battle__model_b_id"))
        .values("id", "ip_hash", "voter_id", "side_a", "side_b")
        .query.sql_with_params()
    )
    # The text is constant but for Django's own compiled query; every value is a parameter.
    source = "CASE WHEN t.ip_hash <> '' THEN t.ip_hash ELSE 'session:' || t.voter_id END"
    sides = " UNION ALL ".join(
        f"SELECT t.id AS id, {source} AS src, t.{side} AS m FROM ({inner}) t"  # noqa: S608
        for side in ("side_a", "side_b")
    )
    sql = (
        "SELECT r.id FROM (SELECT s.id AS id, "  # noqa: S608
        "ROW_NUMBER() OVER (PARTITION BY s.src, s.m ORDER BY s.id) AS copy, "
        "COUNT(*) OVER (PARTITION BY s.m) - COUNT(*) OVER (PARTITION BY s.src, s.m) AS others "
        f"FROM ({sides}) s) r "
        "WHERE r.copy > CASE WHEN %s * r.others > %s THEN %s * r.others ELSE %s END"
    )
    share, floor = float(cap.share), int(cap.min_votes)
    return RawSQL(sql, (*params, *params, share, floor, share, floor))  # noqa: S611


@dataclass(frozen=True)
class SourceCapped:
    """Votes ``votes_for_rating`` leaves out for their source's cap."""

    votes: int  # votes left out
    sources: int  # sources with a vote left out


def source_capped_counts(
    *, cap: SourceCap, duplicate_cap: int = 0, include_flagged: bool = False
) -> SourceCapped:
    """What ``votes_for_rating(source_cap=cap, ...)`` leaves out for the source cap."""
    if not cap.on:
        return SourceCapped(votes=0, sources=0)
    votes = _votes_deduplicated(
        anonymous_only=True, include_flagged=include_flagged, duplicate_cap=duplicate_cap
    )
    left = Vote.objects.filter(id__in=_source_capped_votes(votes, cap=cap))
    totals = left.aggregate(
        n=Count("id"),
        addresses=Count("ip_hash", distinct=True, filter=~Q(ip_hash="")),
        sessions=Count("voter_id", distinct=True, filter=Q(ip_hash="")),
    )
    return SourceCapped(
        votes=int(totals["n"]), sources=int(totals["addresses"]) + int(totals["sessions"])
    )


def votes_for_rating(
    *,
    anonymous_only: bool = True,
    include_flagged: bool = False,
    duplicate_cap: int = 0,
    source_cap: SourceCap | None = None,
    reactions_decide_ties: bool = False,
) -> QuerySet[Any, Any]:
    """The votes the leaderboard is computed from: anonymous, unflagged by default, never an
    environment battle's.

    The one read through which the ratings app sees arena's votes. Rows carry the battle's model
    slugs, the winner, the style counts and what the leaderboard's categories need, so the rating
    side never touches battle internals:

    - ``battle__prompt__category`` and ``battle__prompt__language`` of the prompt;
    - ``turns``: how many user turns the battle showed (its current side-A messages);
    - ``prompt_chars``: characters of user text over those turns;
    - ``prompt_has_code``: whether any of those turns holds a fenced code block;
    - ``prompt_has_image``: whether the prompt had images (``Prompt.image_count``).
    - ``code_ran``: the visitor ran code of both answers in the browser before voting.

    ``duplicate_cap`` above 0 down-samples repeated visitors' prompts: of the votes whose
    prompt's first turn normalises to the same text (``Prompt.text_hash``), only the first
    ``duplicate_cap`` by vote id stay, counted among the votes the other rules keep
    (``_repeated_prompt_votes``; ``repeated_prompt_counts`` counts what is left out).

    ``source_cap`` (``SourceCap``) bounds each source's influence: its votes on a model past
    ``max(min_votes, share * n)`` are left out, ``n`` the model's votes from the other sources,
    counted among the votes the rules above keep (``_source_capped_votes``;
    ``source_capped_counts`` counts what is left out).

    ``rated_winner`` is the verdict the fit reads: the vote's ``winner``, except with
    ``reactions_decide_ties`` a tie or both-bad vote whose answers got opposite reactions
    before the reveal (one thumbs up, the other thumbs down) is rated a win of the liked side.
    """
    qs = _votes_deduplicated(
        anonymous_only=anonymous_only, include_flagged=include_flagged, duplicate_cap=duplicate_cap
    )
    if source_cap is not None and source_cap.on:
        qs = qs.exclude(id__in=_source_capped_votes(qs, cap=source_cap))
    # One side's current messages carry each user turn exactly once.
    turns_shown = BattleMessage.objects.filter(
        battle_id=OuterRef("battle_id"), side=BattleMessage.Side.A, superseded_at__isnull=True
    )
    per_battle = turns_shown.order_by().values("battle_id")
    return (
        qs.order_by("id")
        .annotate(
            rated_winner=_tie_decided_by_reactions() if reactions_decide_ties else F("winner"),
            turns=Coalesce(Subquery(per_battle.annotate(n=Count("id")).values("n")[:1]), Value(0)),
            prompt_chars=Coalesce(
                Subquery(per_battle.annotate(n=Sum(Length("user_content"))).values("n")[:1]),
                Value(0),
            ),
            prompt_has_code=Exists(turns_shown.filter(user_content__contains="```")),
            prompt_has_image=ExpressionWrapper(
                Q(battle__prompt__image_count__gt=0), output_field=BooleanField()
            ),
        )
        .values(
            "id",
            "winner",
            "style",
            "created_at",
            "battle__model_a__slug",
            "battle__model_b__slug",
            "battle__prompt__category",
            "battle__prompt__language",
            "turns",
            "prompt_chars",
            "prompt_has_code",
            "prompt_has_image",
            "code_ran",
            "rated_winner",
        )
    )


def votes_for_cohorts(*, reason: str, account_age: timedelta) -> QuerySet[Any, Any]:
    """The votes the leaderboard's burst test reads (``ratings.cohorts``), in vote-id order:
    those ``votes_for_rating`` starts from (anonymous, never an environment battle's) that are
    unflagged or flagged for ``reason`` alone, so that the test can lift its own flag.

    Rows: ``(id, battle__model_a__slug, battle__model_b__slug, winner, created_at,
    cohort_source, flagged, imported, established)``, the names the reader asks ``values_list``
    for (it reads them as columns); a vote's source is ``account:<id>`` when the visitor was
    signed in, else its address hash, or ``session:<voter id>`` where no address was kept
    (``_source_capped_votes``); ``imported``: the battle came from history the operator imported
    (the demo's expert votes), not from a visitor; ``established``: cast from an account that
    had joined at least ``account_age`` before.
    """
    return (
        _votes_rated(anonymous_only=True, include_flagged=True)
        .filter(Q(flagged=False) | Q(flags=[reason]))
        .annotate(
            cohort_source=Case(
                When(
                    account__isnull=False,
                    then=Concat(Value("account:"), Cast("account_id", output_field=CharField())),
                ),
                When(ip_hash="", then=Concat(Value("session:"), F("voter_id"))),
                default=F("ip_hash"),
                output_field=CharField(),
            ),
            imported=ExpressionWrapper(
                Q(battle__source=Battle.Source.IMPORT), output_field=BooleanField()
            ),
            established=Case(
                When(
                    account__date_joined__lte=ExpressionWrapper(
                        F("created_at") - account_age, output_field=DateTimeField()
                    ),
                    then=Value(True),
                ),
                default=Value(False),
                output_field=BooleanField(),
            ),
        )
        .order_by("id")
        .values_list(
            "id",
            "battle__model_a__slug",
            "battle__model_b__slug",
            "winner",
            "created_at",
            "cohort_source",
            "flagged",
            "imported",
            "established",
        )
    )


def _tie_decided_by_reactions() -> Case:
    """The vote's winner, or for a tie or both-bad vote the side the visitor liked when the
    other side's answer got a thumbs down, both before the names were shown."""
    before = Reaction.objects.filter(battle_id=OuterRef("battle_id"), after_reveal=False)

    def reacted(side: str, liked: bool) -> Exists:
        return Exists(before.filter(side=side, liked=liked))

    undecided = Q(winner__in=[Vote.Winner.TIE, Vote.Winner.BOTH_BAD])
    return Case(
        When(undecided & reacted("a", True) & reacted("b", False), then=Value("model_a")),
        When(undecided & reacted("b", True) & reacted("a", False), then=Value("model_b")),
        default=F("winner"),
        output_field=CharField(),
    )


def votes_for_export(
    *,
    include_named: bool = False,
    include_flagged: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    models: Sequence[str] = (),
    category: str | None = None,
    language: str | None = None,
) -> QuerySet[Vote, Vote]:
    """The votes an export writes, oldest first, each battle with its models, prompt and
    ``current_messages`` (not superseded, by turn and side).

    By default what the leaderboard counts: anonymous battles, unflagged votes. ``since`` is
    inclusive and ``until`` exclusive, on the time of the vote. ``models`` (slugs) keeps the
    battles where either side is one of them; ``category`` and ``language`` are the prompt's.
    """
    # A trainer's submitted completions are its own data, not the arena's public votes.
    qs = Vote.objects.select_related(
        "battle__model_a", "battle__model_b", "battle__prompt"
    ).exclude(battle__source=Battle.Source.ENV)
    if not include_named:
        qs = qs.filter(battle__mode=Battle.Mode.ANONYMOUS)
    if not include_flagged:
        qs = qs.filter(flagged=False)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    if models:
        qs = qs.filter(Q(battle__model_a__slug__in=models) | Q(battle__model_b__slug__in=models))
    if category is not None:
        qs = qs.filter(battle__prompt__category=category)
    if language is not None:
        qs = qs.filter(battle__prompt__language=language)
    current = BattleMessage.objects.filter(superseded_at__isnull=True).order_by("turn", "side")
    return qs.order_by("created_at", "id").prefetch_related(
        Prefetch("battle__messages", queryset=current, to_attr="current_messages")
    )


def prompt_suggestion(*, category: str = "") -> str:
    """A prompt from the pool to offer a visitor of the live battle page ("" when none).

    ``category`` "code" (Code mode) picks a pool prompt of the code or coding category, else one
    of the built-in programming tasks (``arena.code_tasks``)."""
    # Neither a visitor's prompt nor a trainer's (environment prompts' source is "env:<run>").
    prompts = Prompt.objects.exclude(source=USER_PROMPT_SOURCE).exclude(source__startswith="env:")
    categories = SUGGESTION_CATEGORIES[category]
    if categories:
        matches = Q()
        for name in categories:
            matches |= Q(category__iexact=name)
        prompts = prompts.filter(matches)
    prompt = prompts.order_by("?").only("turns").first()
    if prompt is not None and prompt.turns:
        return str(prompt.turns[0])
    return secrets.choice(CODE_TASKS) if category == "code" else ""


@dataclass(frozen=True)
class Limits:
    max_prompt_chars: int
    max_turns: int
    max_output_tokens: int
    max_concurrent_battles: int


def live_limits() -> Limits:
    """The limits in force: the admin's value where set, else the setting."""
    row = LiveLimits.objects.filter(pk=1).first()

    def pick(name: str, setting: str) -> int:
        value = getattr(row, name, None) if row is not None else None
        return int(value if value is not None else getattr(settings, setting))

    return Limits(
        max_prompt_chars=pick("max_prompt_chars", "ARENA_LIVE_MAX_PROMPT_CHARS"),
        max_turns=pick("max_turns", "ARENA_LIVE_MAX_TURNS"),
        max_output_tokens=pick("max_output_tokens", "ARENA_LIVE_MAX_OUTPUT_TOKENS"),
        max_concurrent_battles=pick("max_concurrent_battles", "ARENA_LIVE_MAX_CONCURRENT_BATTLES"),
    )


def providers_available() -> QuerySet[Provider]:
    """Providers whose breaker is closed or whose cool-down has ended."""
    return Provider.objects.filter(
        Q(breaker_open_until__isnull=True) | Q(breaker_open_until__lte=timezone.now())
    )


def live_models_available() -> QuerySet[ArenaModel]:
    """Active live models with a positive weight whose provider's breaker is not open."""
    return (
        ArenaModel.objects.filter(
            is_active=True,
            sampling_weight__gt=0,
            provider__in=providers_available(),
        )
        .exclude(upstream_model_id="")
        .select_related("provider")
    )


def live_battles_enabled() -> bool:
    """Whether the battle page serves live battles: at least two live models can be drawn."""
    return live_models_available().count() >= 2


def live_models_public() -> list[LiveModel]:
    """The models a visitor may pick in named (side-by-side) mode."""
    return [
        {"slug": m.slug, "name": m.display_name, "organization": m.organization}
        for m in live_models_available().filter(is_public=True).order_by("display_name")
    ]


def votes_for_anomaly() -> QuerySet[Any, Any]:
    """The votes the anomalous-voter test reads (ratings.voters): every anonymous vote outside
    environment battles, flagged or not (a flag is a verdict on the vote, not on what the crowd
    thinks of the pair), by id, with the voter, the winner, both sides' model slugs, the style
    counts, and what groups sessions into sources (address hash, user-agent class, time)."""
    return (
        Vote.objects.exclude(battle__source=Battle.Source.ENV)
        .filter(battle__mode=Battle.Mode.ANONYMOUS)
        .order_by("id")
        .values(
            "id",
            "voter_id",
            "winner",
            "battle__model_a__slug",
            "battle__model_b__slug",
            "style",
            "ip_hash",
            "user_agent_class",
            "created_at",
        )
    )


@dataclass(frozen=True)
class VoteAccount:
    """The account a vote was cast from, and when that account was made."""

    account_id: int
    joined: datetime


def vote_accounts(*, vote_ids: Iterable[int]) -> dict[int, VoteAccount]:
    """The account each of ``vote_ids`` was cast from (``Vote.account``), with the account's
    ``date_joined``, by vote id, in one query; a vote cast without an account, or whose account
    was deleted since, is absent. For a reader that weighs votes by their accounts (age,
    history) beside the rated votes it already holds."""
    ids = list(vote_ids)
    if not ids:
        return {}
    found = Vote.objects.filter(pk__in=ids, account__isnull=False).values_list(
        "pk", "account_id", "account__date_joined"
    )
    return {pk: VoteAccount(account_id=account, joined=joined) for pk, account, joined in found}


@dataclass(frozen=True)
class AccountVote:
    """One vote cast from an account, as its owner may see and download it: the battle, both
    models (their slugs and the names shown after the vote), the verdict and its time."""

    vote_id: int
    battle_id: uuid.UUID
    mode: str  # Battle.Mode
    source: str  # Battle.Source
    model_a: str
    model_b: str
    model_a_name: str
    model_b_name: str
    winner: Winner
    created_at: datetime


def account_votes(*, account_id: int) -> list[AccountVote]:
    """Every vote cast from the account, oldest first, in one query (a visitor's own votes are
    a few hundred a day at most: ``ARENA_VOTES_PER_SESSION_PER_DAY``)."""
    found = (
        Vote.objects.filter(account_id=account_id)
        .order_by("created_at", "id")
        .values_list(
            "id",
            "battle_id",
            "battle__mode",
            "battle__source",
            "battle__model_a__slug",
            "battle__model_b__slug",
            "battle__model_a__display_name",
            "battle__model_b__display_name",
            "winner",
            "created_at",
        )
    )
    return [
        AccountVote(
            vote_id=row[0],
            battle_id=row[1],
            mode=row[2],
            source=row[3],
            model_a=row[4],
            model_b=row[5],
            model_a_name=row[6],
            model_b_name=row[7],
            winner=cast(Winner, row[8]),
            created_at=row[9],
        )
        for row in found
    ]


@dataclass(frozen=True)
class ReactionSummary:
    """What visitors said of one model's answers: thumbs up and down, and each reason's count
    (by tag label, most given first)."""

    up: int
    down: int
    reasons_up: list[tuple[str, int]]
    reasons_down: list[tuple[str, int]]


def model_reactions(*, slug: str) -> ReactionSummary:
    """The reactions on a model's answers in anonymous battles, given before the names were
    known (a reaction after the reveal may say more about the name than the answer)."""
    rows = Reaction.objects.filter(after_reveal=False, battle__mode=Battle.Mode.ANONYMOUS).filter(
        Q(side="a", battle__model_a__slug=slug) | Q(side="b", battle__model_b__slug=slug)
    )
    counts = {liked: n for liked, n in rows.values_list("liked").annotate(n=Count("id")).order_by()}
    # A default tag's label (``DEFAULT_REACTION_TAGS``) is in the catalogue; one staff typed
    # has no entry there and shows as typed.
    labels = {
        slug: gettext(label) if label else label
        for slug, label in ReactionTag.objects.values_list("slug", "label")
    }
    tallies: dict[bool, dict[str, int]] = {True: {}, False: {}}
    for liked, tags in rows.values_list("liked", "tags").iterator():
        for tag in tags or []:
            label = labels.get(tag, tag)
            tallies[liked][label] = tallies[liked].get(label, 0) + 1

    def ranked(tally: dict[str, int]) -> list[tuple[str, int]]:
        return sorted(tally.items(), key=lambda item: (-item[1], item[0]))

    return ReactionSummary(
        up=counts.get(True, 0),
        down=counts.get(False, 0),
        reasons_up=ranked(tallies[True]),
        reasons_down=ranked(tallies[False]),
    )


def reaction_tags_active() -> dict[str, list[dict[str, str]]]:
    """The reasons offered with a thumbs up and with a thumbs down, in the staff's order."""
    offered: dict[str, list[dict[str, str]]] = {"up": [], "down": []}
    for slug, label, polarity in ReactionTag.objects.filter(is_active=True).values_list(
        "slug", "label", "polarity"
    ):
        # Worded as ``model_reactions`` words it: a default label translated, a staff one as typed.
        offered[polarity].append({"slug": slug, "label": gettext(label) if label else label})
    return offered


# --- Model health, for the admin's model list ---------------------------------------------------


def _live_answers(*, status: str) -> QuerySet[BattleMessage]:
    """The answers of the model ``OuterRef("pk")`` that it gave live (a live battle, or a mixed
    battle's live side) with ``status``, newest first."""
    own = Q(side=BattleMessage.Side.A, battle__model_a=OuterRef("pk")) | Q(
        side=BattleMessage.Side.B, battle__model_b=OuterRef("pk")
    )
    live = Q(battle__source=Battle.Source.LIVE) | Q(
        battle__source=Battle.Source.MIXED, battle__live_side=F("side")
    )
    return BattleMessage.objects.filter(own, live, status=status).order_by("-created_at")


def models_with_health(queryset: QuerySet[ArenaModel]) -> QuerySet[ArenaModel]:
    """``queryset`` with each model's provider (for its breaker) and, from the answers it gave
    live, ``last_error_at``, ``last_error`` (the stored error text) and ``last_success_at``.

    Read from the answers already saved, so live battles write nothing more for it; the price is
    three subqueries per listed row, paid by the admin's model list only."""
    errors = _live_answers(status=BattleMessage.Status.ERROR)
    done = _live_answers(status=BattleMessage.Status.DONE)
    return queryset.select_related("provider").annotate(
        last_error_at=Subquery(errors.values("created_at")[:1]),
        last_error=Subquery(errors.values("error")[:1]),
        last_success_at=Subquery(done.values("created_at")[:1]),
    )


def provider_breaker_state(provider: Provider, *, now: datetime | None = None) -> str:
    """``closed``, ``open`` (its models sit out until ``breaker_open_until``) or ``half-open``
    (the cool-down is over: drawn again, one more failure reopens it); see arena.live.breaker."""
    now = now or timezone.now()
    if provider.breaker_open_until is not None and provider.breaker_open_until > now:
        return "open"
    return "closed" if provider.breaker_open_until is None else "half-open"
