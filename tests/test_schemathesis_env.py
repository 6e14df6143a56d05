"""The environment's APIs against their own generated OpenAPI documents: the environment API's
(/api/env/v1/openapi.json) and the red-team rewards' mounted under it
(/api/env/v1/redteam/openapi.json), both under the same bearer-token auth.

As tests/test_schemathesis.py does for the public API: Schemathesis generates requests for every
operation of each document, valid ones and ones the document rules out, and sends them to the
ASGI application in process; every answer must be no server error, a documented status, of the documented
content type and schema, and a request the document rules out must be refused. Requests carry a
valid bearer token (the security parameters are the test's, not generated); half of those
naming a run name a real run of that token, so submissions and reward pages are exercised, not
only 404s.

Strings are generated without NUL characters (``allow_x00``) and as UTF-8 (no lone
surrogates): no JSON Schema pattern a generator understands says "no NUL anywhere, keys of a
free-form object included", and the parser refuses both with a 400 naming the field before any
schema applies (arena/tests/test_inputs.py). Three rules of ``POST /runs`` and ``submissions``
depend on data or span fields, so no schema can state them, and a valid request is made to
follow them before it is sent (a request the document rules out is sent as generated): each
reference names a model of this arena that can answer, the webhook URL is empty (which URLs
its guard takes depends on where their hosts resolve; arena/tests/test_env_webhook.py), and a
list of messages ends with a user message and is at most ARENA_ENV_MAX_PROMPT_CHARS long in
all.
"""

import itertools
import uuid

import pytest
import schemathesis
from django.conf import settings
from django.test import Client
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from arena.tests.factories import CompletionFactory
from arena.tokens import token_create
from config.asgi import application
from environment.runs import env_run_create
from redteam.models import AttemptTurn
from redteam.tests.factories import AttemptFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

DOCUMENT_URL = "/api/env/v1/openapi.json"
REDTEAM_DOCUMENT_URL = "/api/env/v1/redteam/openapi.json"
# What this module fuzzes (tests/test_schemathesis.py checks every API's document is fuzzed).
DOCUMENT_URLS = (DOCUMENT_URL, REDTEAM_DOCUMENT_URL)
MAX_EXAMPLES = 25
MAX_PROMPT_CHARS = settings.ARENA_ENV_MAX_PROMPT_CHARS
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.negative_data_rejection,
    schemathesis.checks.positive_data_acceptance,
    schemathesis.checks.unsupported_method,
]


def configured(url: str):
    """The document at ``url``, from the ASGI application, generating as described above
    (tests/test_schemathesis.py configures the public API's document through this too)."""
    document = schemathesis.openapi.from_asgi(url, application)
    document.config.phases.update(phases=["examples", "coverage", "fuzzing"])
    document.config.generation.update(
        modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE],
        max_examples=MAX_EXAMPLES,
        deterministic=True,
        database="none",
        with_security_parameters=False,
        allow_x00=False,
        codec="utf-8",
    )
    return document


schema = configured(DOCUMENT_URL)
redteam_schema = configured(REDTEAM_DOCUMENT_URL)


class Trainer:
    """A token with the env scope, one open run of it and a model that can be a reference."""

    def __init__(self) -> None:
        token, self.raw = token_create(name="fuzzer", scopes=["env"])
        self.run_id = str(env_run_create(token=token, name="fuzzed").pk)
        self.reference = CompletionFactory().model.slug  # a pool answer: it can answer
        self.turn = itertools.count()

    def follow_data_rules(self, case) -> None:
        """A valid body made to follow the rules that depend on data or span fields."""
        body = case.body if isinstance(case.body, dict) else {}
        if case.operation.label == "POST /api/env/v1/runs":
            if isinstance(body.get("references"), list):
                body["references"] = [self.reference for _ in body["references"]]
            if "webhook_url" in body:
                body["webhook_url"] = ""
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt:
            if prompt[-1].get("role") != "user":
                prompt.append({"role": "user", "content": "And then?"})
            if sum(len(message["content"]) for message in prompt) > MAX_PROMPT_CHARS:
                del prompt[:-1]  # the last message alone is within the limit


@pytest.fixture
def trainer(transactional_db) -> Trainer:
    return Trainer()


@pytest.fixture
def redteam_attempts(trainer) -> dict[str, str]:
    """A model's slug with a held and a broken attempt, one with a turn, and the cursor of the
    first (a cursor is only ever read from a page)."""
    held = AttemptFactory(state="surrendered")
    AttemptFactory(state="succeeded", model=held.model)
    AttemptTurn.objects.create(attempt=held, turn=0, user_content="hi", content="no")
    page = Client().get(
        f"{REDTEAM_DOCUMENT_URL.rsplit('/', 1)[0]}/rewards",
        {"model": held.model.slug},
        headers={"Authorization": f"Bearer {trainer.raw}"},
    )
    return {"model": held.model.slug, "after": page.json()["items"][0]["cursor"]}


def _is_uuid(value: object) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


FUZZING = hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@FUZZING
def test_the_env_api_answers_every_generated_request_as_its_document_says(case, trainer):
    # A generated id that is a UUID (a request the document allows there) is half the time
    # the real run's; a malformed one stays, so the request stays as invalid as generated.
    path = case.path_parameters or {}
    if "run_id" in path and _is_uuid(path["run_id"]) and next(trainer.turn) % 2:
        path["run_id"] = trainer.run_id
    if case.meta is not None and case.meta.generation.mode.is_positive:
        trainer.follow_data_rules(case)
    case.call_and_validate(headers={"Authorization": f"Bearer {trainer.raw}"}, checks=CHECKS)


@redteam_schema.parametrize()
@FUZZING
def test_the_redteam_rewards_answer_every_generated_request_as_their_document_says(
    case, trainer, redteam_attempts
):
    # Half of the valid requests name the model with ended attempts, so pages are not all
    # empty; a valid request's cursor is one a page gave (it is opaque: any other string is a
    # request no schema can rule out, and a 400).
    query = case.query if isinstance(case.query, dict) else {}
    if case.meta is not None and case.meta.generation.mode.is_positive:
        turn = next(trainer.turn)
        if "model" in query and turn % 2:
            query["model"] = redteam_attempts["model"]
        if query.get("after"):
            query["after"] = redteam_attempts["after"] if turn % 3 else ""
    case.call_and_validate(headers={"Authorization": f"Bearer {trainer.raw}"}, checks=CHECKS)
