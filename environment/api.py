"""The environment API at ``/api/env/v1/``: django-ninja views over ``environment``'s services and
selectors. The request schemas below validate bodies and generate the OpenAPI document served at
``/api/env/v1/openapi.json``; the services check everything again (they are also called from
Python), with the settings' limits.

Why one module: django-ninja builds the router and its OpenAPI document from the schemas and
views declared here; the request schemas, the error shaping and the views are the API's one
contract, read and reviewed together.

Every request sends ``Authorization: Bearer <token>``: a missing, unknown or revoked token is a
401, a token without the ``env`` scope a 403, more than ``ARENA_ENV_RATE`` requests of one token
a 429, a body over ``ARENA_ENV_MAX_BODY_BYTES`` a 413; every error leaves as the arena's error
body (``ArenaError.as_dict``), a request that does not validate as a 400 naming the first failing
field by its dotted path (``completions.3.text``). No cookie is read, so no CSRF token is asked.

Every 429 carries ``Retry-After``. Every call on a run renews the run's lease (``GET /runs``
does not); a run untouched for ``ARENA_ENV_RUN_IDLE_SECONDS`` is no longer served and is closed
with the reason ``idle`` (``environment.runs.env_runs_idle_close``).
"""

import json
import uuid
from datetime import timedelta
from typing import Annotated, Any, Literal

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django_ratelimit.core import get_usage
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer
from pydantic import BeforeValidator, ConfigDict

from arena.api import error_json, ninja_http_error, ninja_not_found
from arena.errors import ArenaError, ErrorCode
from arena.inputs import json_parse
from arena.models import MODEL_SLUG_MAX, ApiToken
from arena.tokens import BEARER_CHALLENGE, token_for_request
from environment.models import EnvRun
from environment.payloads import (
    CancelResult,
    RewardsPage,
    RunCreated,
    RunPayload,
    RunsPage,
    SubmissionPayload,
)
from environment.rewards import CancelOutcome, env_submissions_cancel
from environment.runs import (
    IDEMPOTENCY_KEY_MAX,
    RUN_NAME_MAX,
    TTL_HOURS_RANGE,
    VOTES_PER_COMPLETION_RANGE,
    WEBHOOK_URL_MAX,
    env_run_close,
    env_run_create,
    env_run_touch,
    env_submission_create,
)
from environment.selectors import (
    REWARDS_DEFAULT_LIMIT,
    REWARDS_MAX_LIMIT,
    RUNS_DEFAULT_LIMIT,
    RUNS_MAX_LIMIT,
    env_rewards_payload,
    env_run_for_token,
    env_run_payload,
    env_runs_page,
    env_submission_payload,
)

API_VERSION = "1"
RATE_GROUP = "environment.api"


class _JsonParser(Parser):
    """JSON bodies through the arena's parser: a nesting limit, a 400 naming the body."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        data = json_parse(request.body, what="The request body", field="body")
        if not isinstance(data, dict):
            raise ArenaError(
                ErrorCode.INVALID_JSON, "The request body must be a JSON object.", field="body"
            )
        return data


class RateLimited(ArenaError):
    """A 429 for a token over ``ARENA_ENV_RATE``, answered with ``Retry-After`` (seconds until
    its window ends)."""

    def __init__(self, *, retry_after: int) -> None:
        super().__init__(
            ErrorCode.RATE_LIMITED,
            f"Too many requests for this API token (the limit is {settings.ARENA_ENV_RATE}).",
            status=429,
            retry_after=retry_after,
        )


class BearerToken(HttpBearer):
    """The ``env`` scope's bearer token, the per-token rate limit and the body size limit,
    checked in that order before the body is parsed."""

    def __call__(self, request: HttpRequest) -> ApiToken:
        api_token = token_for_request(
            authorization=request.headers.get("Authorization", ""), scope=ApiToken.Scope.ENV
        )
        usage = get_usage(
            request,
            group=RATE_GROUP,
            key=lambda group, request: str(api_token.pk),
            rate=settings.ARENA_ENV_RATE,
            increment=True,
        )
        if usage is not None and usage["should_limit"]:
            raise RateLimited(retry_after=max(1, int(usage["time_left"])))
        _body_size_check(request)
        return api_token

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken:
        # HttpBearer's hook, unused: __call__ reads the header itself (token_for_request).
        return self(request)


def _body_size_check(request: HttpRequest) -> None:
    limit = settings.ARENA_ENV_MAX_BODY_BYTES
    too_large = ArenaError(
        ErrorCode.REQUEST_TOO_LARGE,
        f"The request body is larger than {limit} bytes.",
        status=413,
        field="body",
    )
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise too_large
    try:
        if len(request.body) > limit:
            raise too_large
    except RequestDataTooBig:
        raise too_large from None


api = NinjaAPI(
    title="Arena environment API",
    version=API_VERSION,
    description=(
        "Submit groups of a policy's completions; visitors judge them in ordinary anonymous "
        "battles; read the rewards back through a cursor. Authenticate with "
        "`Authorization: Bearer <token>` (a token with the `env` scope, from "
        '`manage.py api_token create`). Errors are `{"error": {"code", "message", '
        '"field"?}}`.'
    ),
    urls_namespace="env_api",
    docs_url=None,  # the interactive page loads its script from a CDN, which the arena never does
    servers=[{"url": "/", "description": "This arena"}],
    auth=BearerToken(),
    parser=_JsonParser(),
)


# --- errors: each one in the arena's error body ------------------------------------------------


def _arena_error(request: HttpRequest, exc: object) -> HttpResponse:
    assert isinstance(exc, ArenaError)
    response = error_json(exc)
    if exc.status == 401:
        response["WWW-Authenticate"] = BEARER_CHALLENGE
    return response


def _validation_error(request: HttpRequest, exc: object) -> HttpResponse:
    """The first failing field, by its dotted path inside the body (or its query or path name)."""
    assert isinstance(exc, NinjaValidationError)
    body = _parsed_body(request)
    # The first failing field; of its errors, the deepest: a union (the prompt's string or
    # messages) reports one error per branch, and the deepest names the part at fault.
    errors = exc.errors or [{}]
    top = _field_path(errors[0], body)[:1]
    first = max(
        (error for error in errors if _field_path(error, body)[:1] == top),
        key=lambda error: len(_field_path(error, body)),
    )
    loc = _field_path(first, body)
    field = ".".join(loc) or "body"
    message = str(first.get("msg", "Invalid value"))
    if (
        first.get("type") == "string_pattern_mismatch"
        and first.get("ctx", {}).get("pattern") == NOT_BLANK
    ):
        message = "Should hold more than whitespace"
    return error_json(ArenaError(ErrorCode.INVALID, f"{field}: {message}.", field=field))


def _parsed_body(request: HttpRequest) -> Any:
    """The JSON body (parsed without error before validation ran), or None for none."""
    try:
        return json.loads(request.body) if request.body else None
    except ValueError:
        return None


def _field_path(error: dict[str, Any], body: Any) -> list[str]:
    """An error's location without its source (body, query, path), the body's parameter name
    and a union's branch names.

    A branch is named by its type ("str", "constrained-str", "list[...]") or by its tag (a
    message's role), which is no key or index of the body: the location is followed through
    the body, and a part the value there does not have is dropped, unless the value is an
    object and the part comes last (a missing or unknown field's name).
    """
    loc = [str(part) for part in error.get("loc", ())]
    if loc[:2] == ["body", "payload"]:
        loc = loc[2:]
    elif loc[:1] in (["body"], ["query"], ["path"]):
        return loc[1:]
    else:
        return loc
    path: list[str] = []
    value = body
    for i, part in enumerate(loc):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and i == len(loc) - 1:
            pass
        else:
            continue
        path.append(part)
    if error.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        path.append(str(error.get("ctx", {}).get("discriminator", "")).strip("'"))  # "role"
    return path


def error_handlers_add(target: NinjaAPI) -> None:
    """Every error of ``target`` in the arena's error body, as this API answers them: an API
    mounted beside this one under its bearer-token auth (the red-team rewards) answers alike."""
    target.add_exception_handler(ArenaError, _arena_error)
    target.add_exception_handler(NinjaValidationError, _validation_error)
    target.add_exception_handler(HttpError, ninja_http_error)
    target.add_exception_handler(Http404, ninja_not_found)


error_handlers_add(api)


# --- schemas: requests, and the error body for the document ------------------------------------


# Text that must hold something besides whitespace, as the services check it (``str.strip``):
# Python's ``\s`` is ``str.isspace``, so the pattern is matched with Python's ``re``.
NOT_BLANK = r"\S"


def _integral(value: object) -> object:
    """A float with no fraction as the integer it is: JSON Schema's ``integer`` takes ``3.0``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# A whole number, given as 3 or 3.0; still no coercion from strings or booleans.
WholeNumber = Annotated[int, BeforeValidator(_integral)]


class _Strict(Schema):
    # No coercion ("3" is not 3) and no unknown fields (a typo is an error, not a default).
    model_config = ConfigDict(strict=True, extra="forbid", regex_engine="python-re")


class RunIn(_Strict):
    name: str = Field(min_length=1, max_length=RUN_NAME_MAX, pattern=NOT_BLANK)
    references: list[Annotated[str, Field(min_length=1, max_length=MODEL_SLUG_MAX)]] = Field(
        default_factory=list,
        description="Slugs of models whose answers to the same prompt each completion also "
        "meets: active models with a provider or pool answers (another slug is a 400).",
    )
    votes_per_completion: WholeNumber = Field(
        3, ge=VOTES_PER_COMPLETION_RANGE[0], le=VOTES_PER_COMPLETION_RANGE[1]
    )
    ttl_hours: WholeNumber = Field(72, ge=TTL_HOURS_RANGE[0], le=TTL_HOURS_RANGE[1])
    share: float = Field(
        0.2,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="The highest fraction of the battles served that may come from this run.",
    )
    webhook_url: str = Field(
        "",
        max_length=WEBHOOK_URL_MAX,
        description=(
            "https URL (http only where the operator allows it) of a public host, without "
            "user:password@; empty for no webhook."
        ),
    )
    reward_model: bool = Field(
        False,
        description=(
            "Model rewards at once: each completion's record gets the arena's reward model's "
            'score and 95% interval (source "model") right after its submission, superseded '
            'by the visitors\' (source "human") when their votes give one; the completions it '
            "is least sure of are served to visitors first. A 409 naming reward_model where "
            "the arena runs no reward model (ARENA_REWARD_MODEL off, or the reward-model extra "
            "not installed)."
        ),
    )


class UserMessageIn(_Strict):
    role: Literal["user"]
    content: str = Field(
        min_length=1, max_length=settings.ARENA_ENV_MAX_PROMPT_CHARS, pattern=NOT_BLANK
    )


class OtherMessageIn(_Strict):
    role: Literal["system", "assistant"]
    content: str = Field(max_length=settings.ARENA_ENV_MAX_PROMPT_CHARS)


# A user message is never blank; a system or assistant message may be.
MessageIn = Annotated[UserMessageIn | OtherMessageIn, Field(discriminator="role")]


class CompletionIn(_Strict):
    text: str = Field(max_length=settings.ARENA_ENV_MAX_COMPLETION_CHARS)
    meta: dict[str, Any] = Field(
        default_factory=dict,
        description="Any JSON object (at most ARENA_ENV_MAX_META_BYTES, 4096, as compact "
        "JSON); returned as is with every reward.",
    )


class SubmissionIn(_Strict):
    idempotency_key: str = Field(min_length=1, max_length=IDEMPOTENCY_KEY_MAX, pattern=NOT_BLANK)
    prompt: (
        Annotated[
            str,
            Field(min_length=1, max_length=settings.ARENA_ENV_MAX_PROMPT_CHARS, pattern=NOT_BLANK),
        ]
        | Annotated[list[MessageIn], Field(min_length=1)]
    ) = Field(
        description="A user message, or messages ending with a user message (at most "
        "ARENA_ENV_MAX_PROMPT_CHARS, 20000, characters in all)."
    )
    completions: list[CompletionIn] = Field(
        min_length=1,
        max_length=settings.ARENA_ENV_MAX_GROUP,
        description="The group: 1 to ARENA_ENV_MAX_GROUP (16) completions.",
    )


# A year: longer than any submission stays pending (ttl_hours is at most TTL_HOURS_RANGE's top).
CANCEL_OLDER_THAN_MAX = 365 * 24 * 3600


class CancelIn(_Strict):
    older_than_seconds: WholeNumber = Field(
        ge=0,
        le=CANCEL_OLDER_THAN_MAX,
        description="Cancel the pending completions of submissions created at least this many "
        "seconds ago (0: every pending submission).",
    )


class RewardsQuery(Schema):
    cursor: int = Field(0, ge=0, description="next_cursor of the previous page; 0 at first.")
    limit: int = Field(REWARDS_DEFAULT_LIMIT, ge=1, le=REWARDS_MAX_LIMIT)


class RunsQuery(Schema):
    offset: int = Field(0, ge=0, description="next_offset of the previous page; 0 at first.")
    limit: int = Field(RUNS_DEFAULT_LIMIT, ge=1, le=RUNS_MAX_LIMIT)


class ErrorDetailOut(Schema):
    code: str
    message: str
    field: str | None = Field(None, description="The input field at fault, when there is one.")


class ErrorOut(Schema):
    error: ErrorDetailOut


AUTH_ERRORS: dict[int, type[Schema]] = {401: ErrorOut, 403: ErrorOut, 413: ErrorOut, 429: ErrorOut}
RUN_ERRORS: dict[int, type[Schema]] = {**AUTH_ERRORS, 400: ErrorOut, 404: ErrorOut}


# --- endpoints -----------------------------------------------------------------------------------


def _token(request: HttpRequest) -> ApiToken:
    token = getattr(request, "auth", None)
    assert isinstance(token, ApiToken)  # set by BearerToken before any view runs
    return token


def _run(request: HttpRequest, run_id: uuid.UUID) -> EnvRun:
    """The token's run, its lease renewed: every call on a run is its trainer's heartbeat."""
    return env_run_touch(run=env_run_for_token(run_id=run_id, token=_token(request)))


def _known_query(request: HttpRequest, schema: type[Schema]) -> None:
    # An unknown parameter (a misspelt "cursor") is an error, not a silent first page.
    for name in request.GET:
        if name not in schema.model_fields:
            raise ArenaError(ErrorCode.INVALID, f"Unknown query parameter {name!r}.", field=name)


@api.get(
    "/runs",
    response={200: RunsPage, 400: ErrorOut, **AUTH_ERRORS},
    summary="The token's runs",
    operation_id="list_runs",
)
def list_runs(request: HttpRequest, page: Query[RunsQuery]) -> RunsPage:
    """The runs of this token (no other token's), newest first, with their state, counts and
    last activity (the trainer's last call on the run). Follow ``next_offset`` until it is
    null. Listing renews no run's lease."""
    _known_query(request, RunsQuery)
    return env_runs_page(token=_token(request), offset=page.offset, limit=page.limit)


@api.post(
    "/runs",
    response={201: RunCreated, 400: ErrorOut, 409: ErrorOut, **AUTH_ERRORS},
    summary="Create a run",
    operation_id="create_run",
)
def create_run(request: HttpRequest, payload: RunIn) -> Status[RunCreated]:
    """A new run. The answer holds, this once, the secret its webhook bodies are signed with.
    A webhook_url whose host does not resolve, or resolves to a loopback, private, link-local or
    other non-public address, is a 400 naming it. reward_model where the arena runs no reward
    model is a 409 naming it (nothing is created). A token with ARENA_ENV_MAX_OPEN_RUNS open
    runs, or ARENA_ENV_RUNS_PER_HOUR created in the last hour, gets a 429 with Retry-After."""
    run = env_run_create(
        token=_token(request),
        name=payload.name,
        references=payload.references,
        votes_per_completion=payload.votes_per_completion,
        ttl_hours=payload.ttl_hours,
        share=payload.share,
        webhook_url=payload.webhook_url,
        reward_model=payload.reward_model,
    )
    shown = env_run_payload(run=run)
    # The run as every read shows it, plus the secret, shown this once.
    body: RunCreated = {
        **shown,
        "webhook_secret": run.webhook_secret,
    }
    return Status(201, body)


@api.get(
    "/runs/{run_id}",
    response={200: RunPayload, **RUN_ERRORS},
    summary="A run's state and counts",
    operation_id="get_run",
)
def get_run(request: HttpRequest, run_id: uuid.UUID) -> RunPayload:
    return env_run_payload(run=_run(request, run_id))


@api.post(
    "/runs/{run_id}/close",
    response={200: RunPayload, **RUN_ERRORS},
    summary="Close a run",
    operation_id="close_run",
)
def close_run(request: HttpRequest, run_id: uuid.UUID) -> RunPayload:
    """Stop serving the run's battles and refuse its further submissions; rewards stay
    readable. Closing a closed run changes nothing."""
    return env_run_payload(run=env_run_close(run=_run(request, run_id)))


@api.post(
    "/runs/{run_id}/submissions",
    response={201: SubmissionPayload, 200: SubmissionPayload, 409: ErrorOut, **RUN_ERRORS},
    summary="Submit a group of completions",
    operation_id="submit",
)
def submit(
    request: HttpRequest, run_id: uuid.UUID, payload: SubmissionIn
) -> Status[SubmissionPayload]:
    """A group of completions of one prompt (201). The same idempotency_key with the same body
    answers 200 with the same ids and creates nothing; with another body it is a 409. A closed
    run is a 409; a run with too many submissions still waiting for votes a 429 with
    Retry-After (as is every 429 of this API)."""
    run = _run(request, run_id)
    prompt: str | list[dict[str, Any]] = (
        payload.prompt
        if isinstance(payload.prompt, str)
        else [message.model_dump() for message in payload.prompt]
    )
    submission, created = env_submission_create(
        run=run,
        idempotency_key=payload.idempotency_key,
        prompt=prompt,
        completions=[completion.model_dump() for completion in payload.completions],
    )
    return Status(201 if created else 200, env_submission_payload(submission=submission))


def _cancel_result(outcome: CancelOutcome) -> CancelResult:
    return {
        "submission_ids": [str(pk) for pk in outcome.submission_ids],
        "completions": outcome.completions,
    }


@api.post(
    "/runs/{run_id}/submissions/cancel",
    response={200: CancelResult, **RUN_ERRORS},
    summary="Cancel the pending submissions older than a time",
    operation_id="cancel_submissions",
)
def cancel_submissions(request: HttpRequest, run_id: uuid.UUID, payload: CancelIn) -> CancelResult:
    """The pending completions of the run's submissions created at least older_than_seconds
    ago become ``cancelled``: no longer served to visitors, and each comes again in the reward
    feed with a new number. Complete and expired records are left as they are; a repeat
    cancels nothing more (an empty answer)."""
    outcome = env_submissions_cancel(
        run=_run(request, run_id), older_than=timedelta(seconds=payload.older_than_seconds)
    )
    return _cancel_result(outcome)


@api.post(
    "/runs/{run_id}/submissions/{submission_id}/cancel",
    response={200: CancelResult, **RUN_ERRORS},
    summary="Cancel one submission's pending completions",
    operation_id="cancel_submission",
)
def cancel_submission(
    request: HttpRequest, run_id: uuid.UUID, submission_id: uuid.UUID
) -> CancelResult:
    """As the cancel above, for one submission of the run (another id is a 404). A POST, not
    a DELETE: the submission and its records stay, only their judging stops."""
    outcome = env_submissions_cancel(run=_run(request, run_id), submission_id=submission_id)
    return _cancel_result(outcome)


@api.get(
    "/runs/{run_id}/rewards",
    response={200: RewardsPage, **RUN_ERRORS},
    summary="Reward records changed after a cursor",
    operation_id="rewards",
)
def rewards(request: HttpRequest, run_id: uuid.UUID, page: Query[RewardsQuery]) -> RewardsPage:
    """The run's reward records changed after ``cursor``, in the order they changed. A record
    comes again only when it changed; following ``next_cursor`` never skips or repeats one."""
    _known_query(request, RewardsQuery)
    return env_rewards_payload(run=_run(request, run_id), cursor=page.cursor, limit=page.limit)


urls = api.urls
