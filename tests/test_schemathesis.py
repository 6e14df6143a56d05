"""The API against its OpenAPI document (arena/openapi.json, served at /api/openapi.json).

Schemathesis generates requests for every operation from the document, valid ones and, in its
negative mode, ones the document rules out, and sends them to the ASGI application in process
(Django's ASGI handler, the middleware and the views as deployed; no network). Every response
must be no server error, a status code the document lists for the operation, and a body of
the documented content type and schema. A bounded, deterministic number of examples keeps the
run short and repeatable.

The requests carry a visitor's session and CSRF token (a POST without them is a 403, which the
document lists but which would hide everything behind it); the staff-only export is called with
a staff session (signed in with the permission to view votes) as well as the visitor's, which
gets the documented 403. Half of the requests for a battle name a real battle of the session
(the other half keep the generated id, mostly an unknown battle), so votes are also recorded.
Schemathesis leaves the security parameters (the cookies and the CSRF header) to the test, so
its negative mode does not count a request it stripped of them and the test re-signed as a
schema-violating request that was accepted.

A request the document allows must be accepted, and one it rules out refused. Strings are
generated without NUL characters and as UTF-8, as in tests/test_schemathesis_env.py (the
document says both are a 400 naming the input, a rule no generator's pattern states for the
keys of a free-form body). Some rules depend on data or on a solution, so no schema states
them, and a valid request is made to follow them before it is sent (a request the document
rules out is sent as generated): a challenge's payload is a freshly solved challenge, an
export's models are model slugs of this arena and its category one the prompts have, and a
date-time bound whose offset takes it past the calendar in UTC (0001-01-01 to 9999-12-31,
which the document states in words and the export refuses) is sent as its date.
"""

import base64
import hashlib
import itertools
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import get_resolver
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from arena.api import VOTER_SESSION_KEY
from arena.models import ArenaModel, Prompt
from arena.services.battles import battle_start_pool
from arena.services.terms import terms_accept
from arena.services.vote_guards import challenge_create
from arena.tests.factories import pool_of
from config.asgi import application

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Generated requests per operation in the fuzzing phase; the coverage phase adds its own fixed
# cases (boundary values, missing parameters, each method the path does not allow).
MAX_EXAMPLES = 25
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.negative_data_rejection,
    schemathesis.checks.positive_data_acceptance,
    schemathesis.checks.unsupported_method,
]

DOCUMENT = Path(__file__).resolve().parent.parent / "arena" / "openapi.json"
schema = schemathesis.openapi.from_path(DOCUMENT)
schema.app = application  # requests go to the ASGI application in process
schema.config.phases.update(phases=["examples", "coverage", "fuzzing"])
schema.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE],
    max_examples=MAX_EXAMPLES,
    deterministic=True,
    database="none",
    with_security_parameters=False,
    allow_x00=False,
    codec="utf-8",
)


def _routes(patterns, prefix=""):
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if hasattr(pattern, "url_patterns"):
            yield from _routes(pattern.url_patterns, route)
        else:
            yield "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def test_the_document_covers_every_api_endpoint_and_the_leaderboard_downloads():
    # The environment API (/api/env/v1/) has its own document, generated from its code and
    # fuzzed in tests/test_schemathesis_env.py.
    routes = {
        route
        for route in _routes(get_resolver().url_patterns)
        if (route.startswith("/api/") and not route.startswith("/api/env/"))
        or route.startswith("/leaderboard.")
    }
    assert routes == set(json.loads(DOCUMENT.read_text())["paths"])


class Sessions:
    """A visitor who accepted the terms and a staff user, as cookies and a CSRF header."""

    def __init__(self) -> None:
        visitor = Client()
        visitor.get("/")  # the session, the voter id and the CSRF cookie, as the page sets them
        terms_accept(voter_id=visitor.session[VOTER_SESSION_KEY])
        self.session_key = visitor.session.session_key
        self.visitor = {name: morsel.value for name, morsel in visitor.cookies.items()}
        staff = Client()
        staff.force_login(get_user_model().objects.create_superuser("auditor", password="x"))
        staff.get("/")
        self.staff = {name: morsel.value for name, morsel in staff.cookies.items()}
        self.turn = itertools.count()
        self.slugs = list(ArenaModel.objects.order_by("slug").values_list("slug", flat=True))
        self.categories = sorted(
            set(Prompt.objects.exclude(category="").values_list("category", flat=True))
        )

    def battle_id(self) -> str:
        return str(battle_start_pool(session_key=self.session_key).battle.pk)

    def follow_data_rules(self, case) -> None:
        """A valid request made to follow the rules that depend on data or on a solution."""
        if case.operation.label == "POST /api/challenge/verify" and isinstance(case.body, dict):
            case.body["payload"] = solved(challenge_create())
        if case.operation.label != "GET /api/exports/votes":
            return
        query = case.query if isinstance(case.query, dict) else {}
        if isinstance(query.get("model"), list):
            query["model"] = [self.slugs[i % len(self.slugs)] for i in range(len(query["model"]))]
        if query.get("category"):
            query["category"] = self.categories[0]
        for bound in ("since", "until"):
            if isinstance(query.get(bound), str):
                query[bound] = within_the_utc_calendar(query[bound])


def solved(challenge) -> str:
    """ALTCHA's payload for a challenge: the number n with hex(SHA-256(salt + n)) == challenge,
    as static/js/challenge.js finds it."""
    salt, target = challenge["salt"], challenge["challenge"]
    number = next(
        n
        for n in range(challenge["maxnumber"] + 1)
        if hashlib.sha256(f"{salt}{n}".encode()).hexdigest() == target
    )
    fields = {**challenge, "number": number}
    del fields["maxnumber"]
    return base64.b64encode(json.dumps(fields).encode()).decode()


def within_the_utc_calendar(moment: str) -> str:
    """The moment, or its date when its offset takes it past 0001-01-01 or 9999-12-31 in UTC
    (a datetime Python cannot hold, which the export refuses before it starts)."""
    try:
        datetime.fromisoformat(moment).astimezone(UTC)
    except OverflowError:
        return moment[:10]
    except ValueError:  # empty: no bound
        pass
    return moment


@pytest.fixture
def arena_state(transactional_db, settings, rated_models):
    """A pool to draw battles from, votes to export and a leaderboard computed from them (the
    60 votes of ``rated_models``), and the two sessions."""
    from ratings import services

    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.ARENA_CHALLENGE_MAX_NUMBER = 1000  # a challenge solved in a few milliseconds
    pool_of(n_models=3, n_prompts=3, turns=2)
    assert services.snapshot_refresh().snapshot is not None
    return Sessions()


def test_the_document_is_served_as_it_is_in_the_repository(client):
    response = client.get("/api/openapi.json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json() == json.loads(DOCUMENT.read_text())
    assert response.json()["openapi"].startswith("3.")


@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_answers_every_generated_request_as_its_document_says(case, arena_state):
    sessions = arena_state
    turn = next(sessions.turn)
    cookies = dict(sessions.visitor)
    if case.path.startswith("/api/exports/") and turn % 3:
        cookies = dict(sessions.staff)
    if "battle_id" in (case.path_parameters or {}) and turn % 2:
        case.path_parameters["battle_id"] = sessions.battle_id()
    if case.meta is not None and case.meta.generation.mode.is_positive:
        sessions.follow_data_rules(case)
    case.call_and_validate(
        headers={"X-CSRFToken": cookies["csrftoken"]}, cookies=cookies, checks=CHECKS
    )
