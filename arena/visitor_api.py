"""The visitor JSON API under ``/api/``: django-ninja operations over the arena's services.

Why one module: the operations, their schemas and the checks before parsing are the one API
document visitors' clients read; each operation is a few lines over a service, and the length is
the document's descriptions, which belong beside the operations they describe.

A router, mounted with the ratings downloads by ``config.api`` into the one document served at
``/api/openapi.json``. The request schemas describe the bodies for the document; the services
check every value again and phrase the errors (a vote's ``winner``, a challenge's ``payload``),
so a field's schema only states what the service takes, and a value it refuses is its 400 naming
the field. Before any of that, ``checked`` refuses a form body (415) and a NUL or lone surrogate
in a URL argument or query parameter (a 400 naming it); the JSON parser (``config.api``) does the
same for the body's strings.

A visitor is a session (``session_identity``); the POSTs pass Django's CSRF check in the
middleware, before any operation runs (``config.api.csrf_checked``). The rate limits are
django-ratelimit's, whose 429 is ``arena.views.ratelimited``.
"""

import functools
import importlib
from collections.abc import AsyncIterator, Callable, Iterator
from itertools import islice
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import reverse
from django_ratelimit.decorators import ratelimit
from ninja import Field, Query, Router, Schema, Status
from ninja.decorators import decorate_view
from pydantic import ConfigDict, JsonValue

# pydantic reads these as response schemas, and on Python 3.11 only typing_extensions' kind.
from typing_extensions import TypedDict

from arena.api import (
    FORM_CONTENT_TYPES,
    VOTE_RATE_GROUP,
    VOTE_RATE_SETTING,
    address_rate_limited,
    client_ip,
    error_json,
    not_json,
    request_account_id,
    session_account_id,
    session_identity,
    session_store_identity,
    text_inputs_problem,
)
from arena.errors import ArenaError, ErrorCode, rate_limited
from arena.exports import (
    FORMATS,
    ExportRow,
    ExportStats,
    copied_rows,
    export_options,
    export_rows,
    first_turn_option,
    jsonl_line,
    supported,
    voted_battles,
)
from arena.exports.pgcopy import DETAILS
from arena.live.images import image_upload
from arena.models import ApiToken
from arena.payloads import WINNERS, BattlePayload
from arena.selectors import battle_for_session, battle_payload
from arena.services.battles import battle_start_pool
from arena.services.reactions import reaction_set
from arena.services.shares import share_create
from arena.services.terms import terms_accept
from arena.services.vote_guards import (
    CHALLENGE_SESSION_KEY,
    ChallengePayload,
    challenge_create,
    challenge_verify,
)
from arena.services.votes import vote_cast
from arena.tokens import BEARER_CHALLENGE, token_for_request

router = Router(tags=["visitor"])


# --- inputs refused before any parsing ----------------------------------------------------------


def checked(*, body: bool) -> Callable[[Callable[..., HttpResponseBase]], Any]:
    """Refuse a NUL or a lone surrogate in a URL argument or query parameter, and with ``body``
    a form body (415: the API takes JSON only; Django has parsed a form before the operation,
    after which its raw body cannot be read)."""

    def decorator(run: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @functools.wraps(run)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            problem = text_inputs_problem(request, kwargs)
            content_type = (request.content_type or "").lower()
            if problem is None and body and content_type.startswith(FORM_CONTENT_TYPES):
                problem = not_json(content_type)
            if problem is not None:
                return error_json(problem)
            return run(request, *args, **kwargs)

        return wrapper

    return decorator


def limited(group: str, setting: str) -> Callable[..., Any]:
    """django-ratelimit's per-address limit of ``setting``, counted in ``group``."""
    return ratelimit(  # type: ignore[no-any-return]
        group=group,
        key="ip",
        rate=lambda group, request: getattr(settings, setting),
        block=True,
    )


# --- schemas ------------------------------------------------------------------------------------


class _Body(Schema):
    # Unknown keys are ignored, as they always were; each field's value is checked by the service.
    model_config = ConfigDict(extra="ignore")


class BattleIn(_Body):
    """Nothing is read from it; an empty body or an object."""


NO_BODY = BattleIn()  # an empty body's


WINNER_VALUES: list[JsonValue] = [winner for winner in sorted(WINNERS)]


class VoteIn(_Body):
    model_config = ConfigDict(json_schema_extra={"required": ["winner"]})
    winner: Any = Field(None, json_schema_extra={"type": "string", "enum": WINNER_VALUES})
    ran: Any = Field(
        None,
        description="Which sides' code blocks the visitor ran in the browser before voting: "
        '{"a": true, "b": true} marks the vote as cast after running code of both.',
        json_schema_extra={
            "type": "object",
            "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}},
            "additionalProperties": False,
        },
    )


class ChallengeVerifyIn(_Body):
    model_config = ConfigDict(json_schema_extra={"required": ["payload"]})
    payload: Any = Field(
        None,
        description="ALTCHA's payload: base64 of the JSON {algorithm, challenge, number, salt, "
        "signature}.",
        json_schema_extra={"type": "string", "minLength": 1},
    )


class TermsIn(_Body):
    model_config = ConfigDict(json_schema_extra={"required": ["accept"]})
    accept: Any = Field(None, json_schema_extra={"const": True})


# The export's yes/no parameters: 1, true or yes; 0, false, no or empty (no), in any case.
FLAG = "^([01]|[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|[Yy][Ee][Ss]|[Nn][Oo])?$"
# A bound of the export: an ISO date or datetime, or empty (no bound).
MOMENT: list[JsonValue] = [
    {"type": "string", "format": "date"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "maxLength": 0},
]


class ExportQuery(Schema):
    """The export's query, as ``arena.exports.export_options`` reads it and refuses it, naming
    the parameter, after the authorisation: nothing here is checked before that."""

    model_config = ConfigDict(json_schema_extra={"required": ["format"]})

    format: str = Field(
        "",
        description="arena (the public Chatbot Arena schema, images as data URLs), trl "
        "(prompt/chosen/rejected message lists), trl-vision (trl's columns and the prompt's "
        "images, image battles only), openai (preference fine-tuning), hh-rlhf (Human/Assistant "
        "transcripts), kto (prompt/completion message lists and a boolean label) or "
        "kto-reactions (the visitors' own thumbs up or down on single answers, with their "
        "reasons).",
        json_schema_extra={"enum": list(FORMATS)},
    )
    include_named: str = Field(
        "",
        description="Named-mode battles too: 1, true or yes; 0, false, no or empty (the "
        "default), in any case.",
        json_schema_extra={"pattern": FLAG},
    )
    include_flagged: str = Field(
        "",
        description="Flagged votes too; as include_named.",
        json_schema_extra={"pattern": FLAG},
    )
    first_turn_only: str = Field(
        "",
        description="Only each battle's first turn; as include_named.",
        json_schema_extra={"pattern": FLAG},
    )
    since: str = Field(
        "",
        description="Votes at or after this moment: an ISO date (midnight UTC) or datetime (UTC "
        "unless it names a zone), within 0001-01-01 and 9999-12-31 in UTC; empty: no bound.",
        json_schema_extra={"anyOf": MOMENT},
    )
    until: str = Field(
        "",
        description="Votes before this moment; as since.",
        json_schema_extra={"anyOf": MOMENT},
    )
    model: list[str] = Field(
        default_factory=list,
        description="Battles where either side is this model (a model slug of this arena; an "
        "unknown one is a 400 naming model). Repeatable: any of them.",
    )
    category: str = Field(
        "",
        description="Battles on prompts of this category (one the prompts have; another is a "
        "400 naming category and listing them).",
    )
    language: str = Field(
        "",
        description="Battles on prompts in this language: a language tag such as en or pt-BR, "
        "at most 20 characters (anything else is a 400 naming language); empty: any language.",
        json_schema_extra={"maxLength": 20, "pattern": "^([A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*)?$"},
    )


class ReactionIn(_Body):
    model_config = ConfigDict(json_schema_extra={"required": ["liked"]})
    liked: Any = Field(
        None,
        description="true (a thumbs up), false (a thumbs down) or null (no reaction: clears it).",
        json_schema_extra={"type": ["boolean", "null"]},
    )
    tags: Any = Field(
        None,
        description="Reasons: active tag slugs of the reaction's polarity (at most 8); "
        "absent or null: none.",
        json_schema_extra={"type": ["array", "null"], "items": {"type": "string"}, "maxItems": 8},
    )


class ReactionOut(TypedDict):
    side: str
    liked: bool | None  # null once cleared
    tags: list[str]
    after_reveal: bool  # given once the names were known


class ShareIn(_Body):
    model_config = ConfigDict(json_schema_extra={"required": ["include_prompt"]})
    include_prompt: Any = Field(
        None,
        description="Whether the shared page shows the prompt (the visitor's own text).",
        json_schema_extra={"type": "boolean"},
    )


class ShareOut(TypedDict):
    url: str  # the public page of the outcome
    card_url: str  # its 1200x630 PNG card
    include_prompt: bool


class ImageOut(TypedDict):
    id: str  # what a live battle's start frame names in its images list
    url: str  # the stored (re-encoded) image
    mime: str  # image/png or image/jpeg: the re-encoded format
    width: int
    height: int
    size: int  # stored bytes


class VerifiedOut(TypedDict):
    verified: Literal[True]
    required: bool  # whether votes need a solved challenge (ARENA_CHALLENGE)


class TermsOut(TypedDict):
    accepted: Literal[True]
    terms_version: str


class ErrorDetailOut(Schema):
    code: str = Field(
        description="Stable and machine-readable, e.g. invalid, invalid_json, "
        "unsupported_media_type, not_found, forbidden, csrf_failed, terms_required, "
        "already_voted, rate_limited."
    )
    message: str
    field: str | None = Field(
        None, description="The input at fault: a body key, body, a query parameter or battle_id."
    )


class ErrorOut(Schema):
    """Every error's body (``ArenaError.as_dict``)."""

    error: ErrorDetailOut


# A POST passes Django's CSRF check: the csrftoken cookie echoed in the X-CSRFToken header.
CSRF: dict[str, Any] = {"security": [{"csrfCookie": [], "csrfHeader": []}]}
# A POST's refusals before its operation runs: a malformed or form body, the CSRF check.
BODY_ERRORS: dict[int, type[Schema]] = {400: ErrorOut, 403: ErrorOut, 415: ErrorOut}


# --- operations ---------------------------------------------------------------------------------


@router.post(
    "/battles",
    response={201: BattlePayload, **BODY_ERRORS, 429: ErrorOut, 503: ErrorOut},
    summary="Serve a pool battle: a prompt and two anonymous answers",
    operation_id="battleCreate",
    openapi_extra=CSRF,
)
@decorate_view(checked(body=True), limited("arena.battle_create", "ARENA_RATELIMIT_BATTLES"))
def battle_create(request: HttpRequest, payload: BattleIn = NO_BODY) -> Status[BattlePayload]:
    """A 503 (no_battle_available) when fewer than two active models answered a common pool
    prompt."""
    session_key, _ = session_identity(request)
    started = battle_start_pool(session_key=session_key)
    return Status(
        201,
        battle_payload(
            battle=started.battle, new_messages=started.messages, image_ids=started.image_ids
        ),
    )


@router.get(
    "/battles/{battle_id}",
    response={200: BattlePayload, 400: ErrorOut, 404: ErrorOut},
    summary="A battle served to this session",
    operation_id="battleDetail",
)
@decorate_view(checked(body=False))
def battle_detail(request: HttpRequest, battle_id: str) -> BattlePayload:
    """Another session's battle, or an id that is no battle's UUID, is a 404."""
    session_key, _ = session_identity(request)
    return battle_payload(battle=battle_for_session(battle_id=battle_id, session_key=session_key))


@router.post(
    "/battles/{battle_id}/vote",
    response={201: BattlePayload, **BODY_ERRORS, 404: ErrorOut, 409: ErrorOut, 429: ErrorOut},
    summary="Vote on a battle served to this session",
    operation_id="voteCreate",
    openapi_extra=CSRF,
)
@decorate_view(checked(body=True), limited(VOTE_RATE_GROUP, VOTE_RATE_SETTING))
def vote_create(request: HttpRequest, battle_id: str, payload: VoteIn) -> Status[BattlePayload]:
    """Once, on a ready battle (another session's is a 404); the answer names both models.
    A 403 is terms_required (field terms), challenge_required (the proof-of-work challenge is
    on and the session has solved none: see /api/challenge) or csrf_failed; a 409
    already_voted or not_votable (still streaming, aborted or errored); a 429 rate_limited or
    vote_cap (the session's or the address's votes for today, UTC, are used up:
    ARENA_VOTES_PER_SESSION_PER_DAY, ARENA_VOTES_PER_IP_PER_DAY)."""
    session_key, voter_id = session_identity(request)
    recorded = vote_cast(
        battle_id=battle_id,
        session_key=session_key,
        voter_id=voter_id,
        challenge_passed=bool(request.session.get(CHALLENGE_SESSION_KEY)),
        winner=payload.winner,
        ran=payload.ran,
        ip=client_ip(request),
        user_agent=request.META.get("HTTP_USER_AGENT"),
        interface_language=getattr(request, "LANGUAGE_CODE", ""),
        account_id=request_account_id(request),
    )
    return Status(
        201,
        battle_payload(
            battle=recorded.vote.battle, new_messages=recorded.messages, vote=recorded.vote
        ),
    )


def vote_over_socket(
    *,
    session_key: str,
    client_ip: str | None,
    user_agent: str | None,
    interface_language: str,
    battle_id: object,
    winner: object,
    ran: object,
) -> BattlePayload:
    """``vote_create`` for a battle socket's ``vote`` frame (``arena.live.consumer``), run in
    the thread for synchronous code as the view is: the address's rate limit first, counted
    with the HTTP votes' (the decorator's group and setting), then the session read fresh by its key (the socket's own
    session object was loaded when it opened, before the visitor may have accepted the terms
    or solved the challenge, or signed in), then the same ``vote_cast``, with the account the
    session is signed in to; the answer is the HTTP vote's body."""
    if address_rate_limited(group=VOTE_RATE_GROUP, setting=VOTE_RATE_SETTING, ip=client_ip):
        raise rate_limited()
    engine = importlib.import_module(settings.SESSION_ENGINE)
    session = engine.SessionStore(session_key or None)
    key, voter_id = session_store_identity(session)
    recorded = vote_cast(
        battle_id=battle_id,
        session_key=key,
        voter_id=voter_id,
        challenge_passed=bool(session.get(CHALLENGE_SESSION_KEY)),
        winner=winner,
        ran=ran,
        ip=client_ip,
        user_agent=user_agent,
        interface_language=interface_language,
        account_id=session_account_id(session),
    )
    return battle_payload(
        battle=recorded.vote.battle, new_messages=recorded.messages, vote=recorded.vote
    )


@router.put(
    "/battles/{battle_id}/reactions/{side}",
    response={200: ReactionOut, **BODY_ERRORS, 404: ErrorOut, 409: ErrorOut, 429: ErrorOut},
    summary="React to one side's answers: a thumbs up or down, with reasons",
    operation_id="reactionSet",
    openapi_extra=CSRF,
)
@decorate_view(checked(body=True), limited("arena.reaction_set", "ARENA_RATELIMIT_VOTES"))
def reaction_put(
    request: HttpRequest, battle_id: str, side: Literal["a", "b"], payload: ReactionIn
) -> ReactionOut:
    """side is a or b. On a ready or voted battle served to this session (another's is a 404;
    one still streaming a 409 not_votable); a reaction after the vote is kept with
    after_reveal true. A bad value is a 400 naming it (side, liked, tags or tags.N)."""
    if "liked" not in payload.model_fields_set:  # null clears; an absent key is a mistake
        raise ArenaError(
            ErrorCode.INVALID, "liked is required: true, false or null.", field="liked"
        )
    session_key, _ = session_identity(request)
    reaction = reaction_set(
        battle_id=battle_id,
        session_key=session_key,
        side=side,
        liked=payload.liked,
        tags=payload.tags,
    )
    if reaction is None:
        return {"side": side, "liked": None, "tags": [], "after_reveal": False}
    return {
        "side": reaction.side,
        "liked": reaction.liked,
        "tags": reaction.tags,
        "after_reveal": reaction.after_reveal,
    }


@router.post(
    "/battles/{battle_id}/share",
    response={201: ShareOut, **BODY_ERRORS, 404: ErrorOut, 409: ErrorOut, 429: ErrorOut},
    summary="Share a voted battle's outcome: a public page and its image card",
    operation_id="shareCreate",
    openapi_extra=CSRF,
)
@decorate_view(checked(body=True), limited("arena.share_create", "ARENA_RATELIMIT_VOTES"))
def share_post(request: HttpRequest, battle_id: str, payload: ShareIn) -> Status[ShareOut]:
    """After the vote, by the session that voted (before it, a 409 not_votable; another
    session's battle is a 404). The same choice gives the same link again."""
    session_key, _ = session_identity(request)
    share = share_create(
        battle_id=battle_id, session_key=session_key, include_prompt=payload.include_prompt
    )
    return Status(
        201,
        {
            "url": reverse("arena:share", args=[share.token]),
            "card_url": reverse("arena:share-card", args=[share.token]),
            "include_prompt": share.include_prompt,
        },
    )


# The upload's body: multipart/form-data with one file, which the operation reads itself (a
# schema parameter would make django-ninja answer a missing file with its own 422).
IMAGE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {"image": {"type": "string", "format": "binary"}},
                }
            }
        },
    }
}


@router.post(
    "/images",
    response={201: ImageOut, 400: ErrorOut, 403: ErrorOut, 413: ErrorOut, 429: ErrorOut},
    summary="Upload an image for a live prompt",
    operation_id="imageCreate",
    openapi_extra={**CSRF, **IMAGE_BODY},
)
@decorate_view(checked(body=False), limited("arena.image_create", "ARENA_RATELIMIT_UPLOADS"))
def image_create(request: HttpRequest) -> Status[ImageOut]:
    """multipart/form-data, the file in the field image: a PNG, JPEG, WebP or GIF by its
    content, at most ARENA_IMAGE_MAX_BYTES bytes as sent and as stored (else a 413
    request_too_large), ARENA_IMAGE_MAX_PIXELS pixels and ARENA_IMAGE_MAX_ASPECT_RATIO, whole
    and checked within ARENA_IMAGE_CPU_SECONDS (a 400 invalid_file naming field image
    otherwise: another type whatever its name, a decompression bomb, a corrupt or truncated
    file), within today's quotas of unattached bytes (a 429 image_quota). Stored re-encoded
    without metadata; nothing is stored when refused. Its id then goes in a live battle's
    start frame (images)."""
    session_key, _ = session_identity(request)
    image = image_upload(
        session_key=session_key, upload=request.FILES.get("image"), client_ip=client_ip(request)
    )
    return Status(
        201,
        {
            "id": str(image.pk),
            "url": reverse("arena:prompt-image", args=[image.pk]),
            "mime": image.mime,
            "width": image.width,
            "height": image.height,
            "size": image.size,
        },
    )


@router.get(
    "/challenge",
    response={200: ChallengePayload, 400: ErrorOut},
    summary="A proof-of-work challenge",
    operation_id="challengeNew",
)
@decorate_view(checked(body=False))
def challenge_new(request: HttpRequest) -> ChallengePayload:
    """ALTCHA's protocol, SHA-256: find the number n <= maxnumber with hex(sha256(salt + n))
    == challenge. The challenge is signed and expires (the expiry is in the salt)."""
    return challenge_create()


@router.post(
    "/challenge/verify",
    response={200: VerifiedOut, **BODY_ERRORS, 429: ErrorOut},
    summary="Send a solved challenge",
    operation_id="challengeVerify",
    openapi_extra=CSRF,
)
@decorate_view(checked(body=True), limited("arena.challenge_verify", "ARENA_RATELIMIT_VOTES"))
def challenge_verify_view(request: HttpRequest, payload: ChallengeVerifyIn) -> VerifiedOut:
    """The session may then vote (when the challenge is on); each challenge verifies once. A
    400 challenge_failed (field payload): not a solved challenge, a wrong number or signature,
    expired, or used already."""
    challenge_verify(payload=payload.payload)
    session_identity(request)
    request.session[CHALLENGE_SESSION_KEY] = True
    return {"verified": True, "required": settings.ARENA_CHALLENGE}


@router.post(
    "/terms",
    response={200: TermsOut, **BODY_ERRORS},
    summary="Accept the current terms",
    operation_id="termsAccept",
    openapi_extra=CSRF,
)
@decorate_view(checked(body=True))
def terms_accept_view(request: HttpRequest, payload: TermsIn) -> TermsOut:
    """Votes and prompts may then be published; accepting again changes nothing."""
    if payload.accept is not True:
        raise ArenaError(
            ErrorCode.INVALID, 'Send {"accept": true} to accept the terms.', field="accept"
        )
    _, voter_id = session_identity(request)
    acceptance = terms_accept(voter_id=voter_id, ip=client_ip(request))
    return {"accepted": True, "terms_version": acceptance.terms_version}


@router.get(
    "/exports/votes",
    response={400: ErrorOut, 401: ErrorOut, 403: ErrorOut},
    summary="Votes as JSONL in a trainer's format, streamed",
    operation_id="votesExport",
    url_name="votes-export",
    openapi_extra={
        "security": [{"session": []}, {"bearer": []}],
        "responses": {
            200: {
                "description": "One JSON object a line (the format's record), oldest vote first.",
                "headers": {
                    "Content-Disposition": {
                        "schema": {
                            "type": "string",
                            "pattern": '^attachment; filename="arena-votes-',
                        }
                    }
                },
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            },
            401: {
                "headers": {
                    "WWW-Authenticate": {
                        "schema": {"type": "string", "const": 'Bearer realm="arena"'}
                    }
                }
            },
        },
    },
)
@decorate_view(checked(body=False))
def votes_export(
    request: HttpRequest, query: Query[ExportQuery]
) -> HttpResponse | StreamingHttpResponse:
    """For staff with the permission to view votes, or an API token with the export scope. A
    request with an Authorization header is the token's alone: a missing, unknown or revoked
    token is a 401, one without the scope a 403, whoever is signed in; without one, the staff
    session's (not signed in as staff, or without the permission, is a 403)."""
    authorization = request.headers.get("Authorization")
    if authorization is not None:
        try:
            token_for_request(authorization=authorization, scope=ApiToken.Scope.EXPORT)
        except ArenaError as exc:
            denied = error_json(exc)
            if exc.status == 401:
                denied["WWW-Authenticate"] = BEARER_CHALLENGE
            return denied
    elif not (request.user.is_authenticated and request.user.is_staff):
        raise ArenaError(
            ErrorCode.FORBIDDEN,
            "Exports are for staff (sign in to the admin first) or an API token with the "
            "export scope (Authorization: Bearer <token>).",
            status=403,
        )
    elif not request.user.has_perm("arena.view_vote"):
        raise ArenaError(
            ErrorCode.FORBIDDEN, "Exports need the permission to view votes.", status=403
        )
    fmt, filters = export_options(request.GET, models=request.GET.getlist("model"))
    first_turn_only = first_turn_option(request.GET)
    rows: Iterator[ExportRow | bytes]
    if supported():  # PostgreSQL: streamed with COPY (arena.exports.pgcopy)
        rows = copied_rows(fmt, ExportStats(), first_turn_only=first_turn_only, **filters)
    else:
        records = voted_battles(details=fmt in DETAILS, **filters)
        rows = export_rows(records, fmt, ExportStats(), first_turn_only=first_turn_only)
    response = StreamingHttpResponse(_jsonl_batches(rows), content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="arena-votes-{fmt}.jsonl"'
    return response


async def _jsonl_batches(rows: Iterator[ExportRow | bytes]) -> AsyncIterator[bytes]:
    """The rows as JSONL, a batch at a time from one database thread.

    An async iterator, so that under ASGI the export is sent as it is read; Django would first
    collect a plain generator into a list (the whole export in memory) before sending a byte.
    """
    next_batch = sync_to_async(_jsonl_batch, thread_sensitive=True)
    while batch := await next_batch(rows):
        yield batch


def _jsonl_batch(rows: Iterator[ExportRow | bytes], size: int = 200) -> bytes:
    """The next rows' lines; a row given as bytes is its line already."""
    return b"".join(
        row if isinstance(row, bytes) else jsonl_line(row).encode() for row in islice(rows, size)
    )
