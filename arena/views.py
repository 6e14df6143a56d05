"""HTTP views: thin wrappers that parse input, call one service and shape the output."""

from collections.abc import AsyncIterator, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_POST
from django_ratelimit.decorators import ratelimit

from arena.api import api_view, client_ip, error_json, json_body, session_identity
from arena.battle_sources import battle_sources_have_work
from arena.errors import ArenaError, ErrorCode
from arena.exports import (
    ExportRow,
    ExportStats,
    export_options,
    export_rows,
    first_turn_option,
    jsonl_line,
    voted_battles,
)
from arena.models import ApiToken
from arena.payloads import BattlePayload
from arena.selectors import (
    battle_for_session,
    battle_payload,
    live_battles_enabled,
    pool_available,
    terms_accepted,
)
from arena.services.battles import battle_start_pool
from arena.services.terms import terms_accept
from arena.services.vote_guards import (
    CHALLENGE_SESSION_KEY,
    ChallengePayload,
    challenge_create,
    challenge_required_error,
    challenge_verify,
    vote_caps_release,
    vote_caps_take,
)
from arena.services.votes import vote_record
from arena.tokens import BEARER_CHALLENGE, token_for_request


def ratelimited(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_json(
        ArenaError(ErrorCode.RATE_LIMITED, "Too many requests; slow down.", status=429)
    )


# The kinds of battle the page serves, in the order the page offers them.
BATTLE_KINDS = (
    ("live", "Ask two models", "Type a prompt; two anonymous models answer it live."),
    ("pool", "Rate two answers", "Read two anonymous answers already given to a prompt."),
)


@require_GET
@ensure_csrf_cookie
def battle_page(request: HttpRequest) -> HttpResponse:
    """Live battles (a typed prompt) and pool battles (two stored answers, imported pools
    included), each offered when it can be served; ``?mode=live|pool`` picks one, else live."""
    _, voter_id = session_identity(request)
    # Pool mode also serves environment battles, so it is offered when only they can be served.
    available = {
        "live": live_battles_enabled(),
        "pool": pool_available() or battle_sources_have_work(),
    }
    kinds = [
        {"key": key, "label": label, "description": description}
        for key, label, description in BATTLE_KINDS
        if available[key]
    ]
    offered = [kind["key"] for kind in kinds]
    requested = request.GET.get("mode", "")
    # With neither kind available, pool mode says so when it asks for a battle.
    mode = requested if requested in offered else (offered[0] if offered else "pool")
    return render(
        request,
        "arena/battle.html",
        {
            "terms_accepted": terms_accepted(voter_id=voter_id),
            "mode": mode,
            "kinds": kinds if len(kinds) > 1 else [],
            "terms_version": settings.ARENA_TERMS_VERSION,
            # The page solves the challenge in the background before the first vote.
            "challenge": settings.ARENA_CHALLENGE
            and not request.session.get(CHALLENGE_SESSION_KEY),
            # ``?mode=live`` asked for what this site cannot serve: the page says so.
            "live_off": requested == "live" and not available["live"],
        },
    )


@require_POST
@ratelimit(key="ip", rate=lambda group, request: settings.ARENA_RATELIMIT_BATTLES, block=True)  # type: ignore[untyped-decorator]
@api_view
def battle_create(request: HttpRequest) -> tuple[BattlePayload, int]:
    json_body(request)  # nothing is read from it, but a form or a malformed body is refused
    session_key, _ = session_identity(request)
    started = battle_start_pool(session_key=session_key)
    return battle_payload(battle=started.battle, new_messages=started.messages), 201


@require_GET
@api_view
def battle_detail(request: HttpRequest, battle_id: str) -> BattlePayload:
    session_key, _ = session_identity(request)
    return battle_payload(battle=battle_for_session(battle_id=battle_id, session_key=session_key))


@require_POST
@ratelimit(key="ip", rate=lambda group, request: settings.ARENA_RATELIMIT_VOTES, block=True)  # type: ignore[untyped-decorator]
@api_view
def vote_create(request: HttpRequest, battle_id: str) -> tuple[BattlePayload, int]:
    body = json_body(request)
    session_key, voter_id = session_identity(request)
    if settings.ARENA_CHALLENGE and not request.session.get(CHALLENGE_SESSION_KEY):
        raise challenge_required_error()
    ip = client_ip(request)
    counted = vote_caps_take(session_key=session_key, ip=ip)
    try:
        recorded = vote_record(
            battle_id=battle_id,
            session_key=session_key,
            voter_id=voter_id,
            winner=body.get("winner"),
            ip=ip,
            user_agent=request.META.get("HTTP_USER_AGENT"),
        )
    except Exception:
        vote_caps_release(counted)
        raise
    return battle_payload(
        battle=recorded.vote.battle, new_messages=recorded.messages, vote=recorded.vote
    ), 201


@require_GET
@api_view
def challenge_new(request: HttpRequest) -> ChallengePayload:
    """A proof-of-work challenge (ALTCHA's JSON) to solve before the session's first vote."""
    return challenge_create()


@require_POST
@ratelimit(key="ip", rate=lambda group, request: settings.ARENA_RATELIMIT_VOTES, block=True)  # type: ignore[untyped-decorator]
@api_view
def challenge_verify_view(request: HttpRequest) -> dict[str, Any]:
    """Check a solved challenge (``{"payload": "<base64 JSON>"}``) and mark the session."""
    body = json_body(request)
    challenge_verify(payload=body.get("payload"))
    session_identity(request)
    request.session[CHALLENGE_SESSION_KEY] = True
    return {"verified": True, "required": settings.ARENA_CHALLENGE}


@require_POST
@api_view
def terms_accept_view(request: HttpRequest) -> dict[str, Any]:
    body = json_body(request)
    if body.get("accept") is not True:
        raise ArenaError(
            ErrorCode.INVALID, 'Send {"accept": true} to accept the terms.', field="accept"
        )
    _, voter_id = session_identity(request)
    acceptance = terms_accept(voter_id=voter_id, ip=client_ip(request))
    return {"accepted": True, "terms_version": acceptance.terms_version}


# The API's OpenAPI document, hand-written until the API has a schema layer; tests check the
# application against it (tests/test_schemathesis.py).
OPENAPI_DOCUMENT = Path(__file__).with_name("openapi.json")


@require_GET
def openapi_schema(request: HttpRequest) -> HttpResponse:
    return HttpResponse(OPENAPI_DOCUMENT.read_bytes(), content_type="application/json")


@require_GET
def about_page(request: HttpRequest) -> HttpResponse:
    return render(request, "arena/about.html")


@require_GET
@api_view
def votes_export(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """Votes as JSONL in a trainer's format (``arena.exports``), for staff who may view votes
    or an API token with the ``export`` scope.

    Query: ``format`` (arena, trl, openai, hh-rlhf, kto), ``include_named``,
    ``include_flagged``, ``since``, ``until``, ``model`` (repeatable), ``category``,
    ``language``, ``first_turn_only``. The manage.py command ``export_votes`` writes the same rows (and Parquet, and
    a folder with a dataset card) and reports what it skipped.

    A request with an ``Authorization`` header is the token's alone (a bad token is a 401, one
    without the scope a 403, whoever is signed in); without one, the staff session's.
    """
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
    records = voted_battles(details=fmt == "arena", **filters)
    rows = export_rows(records, fmt, ExportStats(), first_turn_only=first_turn_only)
    response = StreamingHttpResponse(_jsonl_batches(rows), content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="arena-votes-{fmt}.jsonl"'
    return response


async def _jsonl_batches(rows: Iterator[ExportRow]) -> AsyncIterator[str]:
    """The rows as JSONL, a batch at a time from one database thread.

    An async iterator, so that under ASGI the export is sent as it is read; Django would first
    collect a plain generator into a list (the whole export in memory) before sending a byte.
    """
    next_batch = sync_to_async(_jsonl_batch, thread_sensitive=True)
    while batch := await next_batch(rows):
        yield batch


def _jsonl_batch(rows: Iterator[ExportRow], size: int = 200) -> str:
    return "".join(jsonl_line(row) for row in islice(rows, size))
