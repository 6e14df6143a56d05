"""Hostile HTTP input that used to answer 500: each is now a 4xx naming the
field, in the API's error shape."""

import json
import logging

import pytest
from django.db import DataError, connection, transaction
from django.test import Client
from django.test.client import encode_multipart

from arena.api import VOTER_SESSION_KEY
from arena.models import Battle, BattleMessage, Completion, Prompt, Vote
from arena.services.terms import terms_accept
from arena.tests.factories import pool_of

pytestmark = pytest.mark.django_db

EXPORT = "/api/exports/votes"
NO_SUCH_BATTLE = "00000000-0000-0000-0000-000000000000"


def post_json(client, url, body):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json")


def assert_error(response, status, code, field):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert (error["code"], error.get("field")) == (code, field), error
    return error


@pytest.fixture
def pool():
    return pool_of(n_models=2, n_prompts=2)


@pytest.fixture
def browser_visitor(db) -> Client:
    """A visitor whose requests pass the CSRF check the way a browser's do (the token as a
    header), so the check reads a form body before the view, as it does in production."""
    client = Client(enforce_csrf_checks=True, HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux) Test")
    client.get("/")
    terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
    client.defaults["HTTP_X_CSRFTOKEN"] = client.cookies["csrftoken"].value
    return client


# --- Form bodies: a 415 naming the body --------------------------------------------------------


def battle_url(client, suffix=""):
    battle = post_json(client, "/api/battles", {})
    assert battle.status_code == 201, battle.content
    return f"/api/battles/{battle.json()['id']}{suffix}"


@pytest.mark.parametrize("endpoint", ["terms", "battles", "vote"])
@pytest.mark.parametrize(
    "form",
    [
        ("multipart/form-data; boundary=BoUnDaRy", {"accept": "true", "winner": "tie"}),
        ("application/x-www-form-urlencoded", "accept=true&winner=tie"),
    ],
    ids=["multipart", "urlencoded"],
)
def test_a_form_posted_to_the_api_is_a_415_naming_the_body(browser_visitor, pool, endpoint, form):
    url = {"terms": "/api/terms", "battles": "/api/battles"}.get(endpoint) or battle_url(
        browser_visitor, "/vote"
    )
    content_type, data = form
    if isinstance(data, dict):
        data = encode_multipart("BoUnDaRy", data)
    battles = Battle.objects.count()
    response = browser_visitor.post(url, data=data, content_type=content_type)
    error = assert_error(response, 415, "unsupported_media_type", "body")
    assert "application/json" in error["message"]
    assert Battle.objects.count() == battles and not Vote.objects.exists()


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/form-data", b"no boundary"),
        ("multipart/form-data; boundary=" + "b" * 80, b"--x"),  # a boundary too long
        ("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="a"'),
    ],
    ids=["no-boundary", "long-boundary", "truncated"],
)
def test_a_form_django_cannot_parse_is_a_415_naming_the_body_too(
    browser_visitor, pool, content_type, body
):
    response = browser_visitor.post("/api/terms", data=body, content_type=content_type)
    assert_error(response, 415, "unsupported_media_type", "body")


def test_a_form_django_cannot_parse_on_the_upload_is_a_400_naming_the_body(browser_visitor):
    """The upload takes a form, so its refusal is no "must be JSON": the form is unreadable."""
    response = browser_visitor.post(
        "/api/images", data=b"no boundary", content_type="multipart/form-data"
    )
    error = assert_error(response, 400, "bad_request", "body")
    assert "multipart" in error["message"] and "JSON" not in error["message"]


def test_the_same_requests_as_json_are_accepted(browser_visitor, pool):
    assert post_json(browser_visitor, "/api/terms", {"accept": True}).status_code == 200
    vote = post_json(browser_visitor, battle_url(browser_visitor, "/vote"), {"winner": "tie"})
    assert vote.status_code == 201 and Vote.objects.get().winner == "tie"
    # The page's own request (a JSON content type, no body), and one naming no content type.
    for content_type in ("application/json", ""):
        response = browser_visitor.generic("POST", "/api/battles", content_type=content_type)
        assert response.status_code == 201, response.content


# --- NUL and lone surrogates in JSON strings, URL arguments and query parameters ---------------

UNSTORABLE = [("\x00", "NUL"), ("\ud800", "surrogate"), ("ok \udfff", "surrogate")]


@pytest.mark.parametrize(("text", "named"), UNSTORABLE, ids=["nul", "high", "low"])
@pytest.mark.parametrize(
    ("endpoint", "body", "field"),
    [
        ("vote", lambda t: {"winner": t}, "winner"),
        ("vote", lambda t: {"winner": "tie", "note": [{"deep": t}]}, "note.0.deep"),
        ("terms", lambda t: {"accept": t}, "accept"),
        ("terms", lambda t: {"accept": True, t: 1}, "body"),
        ("battles", lambda t: {"mode": t}, "mode"),
    ],
    ids=["vote-winner", "vote-nested", "terms-accept", "terms-key", "battles-mode"],
)
def test_a_nul_or_lone_surrogate_in_a_json_string_is_a_400_naming_the_field(
    visitor, pool, text, named, endpoint, body, field
):
    url = {"terms": "/api/terms", "battles": "/api/battles"}.get(endpoint) or battle_url(
        visitor, "/vote"
    )
    battles = Battle.objects.count()
    # ensure_ascii: the body is valid JSON text that decodes to the unstorable string.
    response = post_json(visitor, url, json.dumps(body(text)))
    error = assert_error(response, 400, "invalid", field)
    assert named in error["message"]
    assert Battle.objects.count() == battles and not Vote.objects.exists()


@pytest.mark.parametrize("method", ["get", "vote"])
@pytest.mark.parametrize("battle_id", ["%00", f"{NO_SUCH_BATTLE}%00"], ids=["nul", "uuid-nul"])
def test_a_nul_in_the_battle_id_is_a_json_404(visitor, method, battle_id):
    """No battle's id holds a NUL: the path names nothing (``UnstorablePathMiddleware``)."""
    if method == "get":
        response = visitor.get(f"/api/battles/{battle_id}")
    else:
        response = post_json(visitor, f"/api/battles/{battle_id}/vote", {"winner": "tie"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert not Vote.objects.exists()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("format=arena%00", "format"),
        ("format=arena&since=2026-01-01%00", "since"),
        ("format=arena&until=%00", "until"),
        ("format=arena&include_named=1%00", "include_named"),
        ("format=arena&extra=%00", "extra"),
        ("format=arena&%00=1", "query"),
    ],
)
def test_a_nul_in_a_query_parameter_is_a_400_naming_it(admin_client, query, field):
    assert_error(admin_client.get(f"{EXPORT}?{query}"), 400, "invalid", field)


def test_invalid_utf8_in_a_query_arrives_replaced_and_is_refused_as_a_bad_value(admin_client):
    # %ED%A0%80 is a surrogate encoded as UTF-8, which is not UTF-8: it arrives as U+FFFD.
    response = admin_client.get(f"{EXPORT}?format=arena&since=%ED%A0%80")
    assert_error(response, 400, "invalid", "since")


def test_a_nul_in_a_query_parameter_of_a_battle_is_a_400(visitor, pool):
    url = battle_url(visitor)
    assert_error(visitor.get(f"{url}?x=%00"), 400, "invalid", "x")
    assert visitor.get(f"{url}?x=1").status_code == 200


# --- Export dates at the edges of the calendar: refused before the download starts -------------


@pytest.fixture
def voted(make_vote):
    from arena.tests.factories import ArenaModelFactory

    return make_vote(ArenaModelFactory(), ArenaModelFactory(), "model_a")


@pytest.mark.parametrize(
    ("bound", "value"),
    [
        ("since", "0001-01-01T00:00:00+05:00"),  # year 0 in UTC
        ("until", "9999-12-31T23:59:59-05:00"),  # year 10000 in UTC
        ("since", "0001-01-01T04:59:59.999999+05:00"),
        ("until", "10000-01-01"),
        ("since", "9999-12-31T23:59:60"),
        ("until", "2026-01-01T00:00:00+24:00"),
        ("since", "2026-02-30"),
    ],
)
def test_an_export_bound_outside_the_calendar_is_a_400_before_streaming(
    admin_client, voted, bound, value
):
    response = admin_client.get(EXPORT, {"format": "arena", bound: value})
    assert not response.streaming
    assert_error(response, 400, "invalid", bound)


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
@pytest.mark.parametrize(
    "params",
    [
        {"since": "0001-01-01"},
        {"since": "0001-01-01T05:00:00+05:00"},  # 0001-01-01 00:00 UTC, the first moment
        {"until": "9999-12-31T23:59:59.999999"},
        {"until": "9999-12-31T18:59:59-05:00"},
        {"since": "0001-01-01T00:00:00Z", "until": "9999-12-31T23:59:59Z"},
    ],
)
def test_export_bounds_at_the_edges_of_the_calendar_stream_every_vote(admin_client, voted, params):
    response = admin_client.get(EXPORT, {"format": "arena", **params})
    assert response.status_code == 200
    lines = b"".join(response).decode().splitlines()
    assert [json.loads(line)["question_id"] for line in lines] == [voted.battle_id.hex]


# --- A pool row holding a lone surrogate: served, never a 500 ---------------------------------


def _with_surrogates(turns):
    return [f"{text} \ud800 and \udfff" for text in turns]


@pytest.fixture
def surrogate_pool(monkeypatch):
    """A pool whose prompt and answers hold lone surrogates, as rows stored before
    ``pool_import`` refused them. SQLite keeps such a row (JSON escapes the code point) and
    gives it back; PostgreSQL refuses to store it, so there the rows are read back altered."""
    models, prompts = pool_of(n_models=2, n_prompts=1)
    if connection.vendor == "sqlite":
        for row in (*prompts, *Completion.objects.all()):
            row.turns = _with_surrogates(row.turns)
            row.save(update_fields=["turns"])
        assert Prompt.objects.get().turns == prompts[0].turns  # stored and read back as is
        return models
    with pytest.raises(DataError), transaction.atomic():
        Prompt.objects.update(turns=_with_surrogates(prompts[0].turns))
    for model in (Prompt, Completion):
        from_db = model.from_db.__func__

        def read_back(cls, db, field_names, values, _from_db=from_db):
            row = _from_db(cls, db, field_names, values)
            if "turns" in row.__dict__:
                row.turns = _with_surrogates(row.turns)
            return row

        monkeypatch.setattr(model, "from_db", classmethod(read_back))
    return models


def test_a_pool_prompt_holding_a_lone_surrogate_is_served_with_replacement_characters(
    visitor, surrogate_pool
):
    response = post_json(visitor, "/api/battles", {})
    assert response.status_code == 201, response.content
    battle = response.json()
    turn = battle["turns"][0]
    for text in (turn["prompt"], turn["a"]["content"], turn["b"]["content"]):
        assert "\ufffd and \ufffd" in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    stored = BattleMessage.objects.filter(battle_id=battle["id"])
    assert stored.count() == 2
    assert all("\ufffd and \ufffd" in m.user_content + m.content for m in stored)
    assert visitor.get(f"/api/battles/{battle['id']}").json()["turns"] == battle["turns"]
    vote = post_json(visitor, f"/api/battles/{battle['id']}/vote", {"winner": "model_b"})
    assert vote.status_code == 201 and vote.json()["vote"] == {"winner": "model_b"}


@pytest.mark.parametrize("url", ["/api/images", "/api/terms"])
def test_a_form_django_cannot_parse_is_logged_on_one_line_without_a_traceback(
    browser_visitor, pool, caplog, url
):
    caplog.set_level(logging.INFO)
    response = browser_visitor.post(url, data=b"no boundary", content_type="multipart/form-data")
    assert 400 <= response.status_code < 500
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert [r.levelno for r in logged] == [logging.WARNING]
    assert "MultiPartParserError" in logged[0].getMessage()  # the cause, on the line
    assert not [r for r in caplog.records if r.exc_info] and "Traceback" not in caplog.text
