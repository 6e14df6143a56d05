"""The environment API over HTTP (/api/env/v1/): auth, runs, submissions, the reward feed."""

import json
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from arena.errors import ArenaError
from arena.models import ArenaModel, Prompt
from arena.tests.factories import ArenaModelFactory, CompletionFactory, ProviderFactory
from arena.tokens import token_create, token_revoke
from environment import outbound
from environment.models import EnvCompletion, EnvRun, EnvSubmission
from environment.runs import env_run_close, env_run_create
from environment.tests.outbound_helpers import StubResolver

BASE = "/api/env/v1"


class Api:
    """A client that sends one token as a bearer token and JSON bodies."""

    def __init__(self, raw: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {raw}"} if raw else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(BASE + path, params, headers=self.headers)

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None) -> Any:
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(
            BASE + path, data, content_type="application/json", headers=self.headers
        )


@pytest.fixture
def api(db) -> Api:
    _, raw = token_create(name="trainer", scopes=["env"])
    return Api(raw)


@pytest.fixture
def other_api(db) -> Api:
    _, raw = token_create(name="someone else", scopes=["env"])
    return Api(raw)


def _run(api: Api, **fields: Any) -> dict[str, Any]:
    response = api.post("/runs", {"name": "grpo-1", **fields})
    assert response.status_code == 201, response.content
    assert response["Cache-Control"] == "no-store"  # arena.api.ApiErrorMiddleware, as under /api/
    return response.json()


def _group(key: str = "k1", n: int = 2, prompt: Any = "What is 2+2?") -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "prompt": prompt,
        "completions": [{"text": f"answer {i}", "meta": {"step": 7, "i": i}} for i in range(n)],
    }


def _error(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/json"
    return response.json()["error"]


# --- auth -----------------------------------------------------------------------------------


def test_a_request_without_a_token_is_401_in_the_error_body(db):
    response = Api(None).post("/runs", {"name": "x"})
    assert response.status_code == 401
    assert _error(response)["code"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response["Cache-Control"] == "no-store"


def test_an_unknown_token_is_401(db):
    response = Api("arena_" + "x" * 43).get(f"/runs/{uuid.uuid4()}")
    assert response.status_code == 401
    assert _error(response)["code"] == "unauthorized"


def test_a_malformed_authorization_header_is_401(api):
    api.headers = {"Authorization": api.headers["Authorization"].replace("Bearer", "Basic")}
    assert api.post("/runs", {"name": "x"}).status_code == 401


def test_a_revoked_token_is_401_and_says_so(db):
    token, raw = token_create(name="old", scopes=["env"])
    client = Api(raw)
    assert client.post("/runs", {"name": "x"}).status_code == 201
    token_revoke(token=token)
    response = client.post("/runs", {"name": "x"})
    assert response.status_code == 401
    assert "revoked" in _error(response)["message"]


def test_a_token_without_the_env_scope_is_403(db):
    _, raw = token_create(name="exports only", scopes=["export"])
    response = Api(raw).post("/runs", {"name": "x"})
    assert response.status_code == 403
    assert _error(response)["code"] == "forbidden"
    assert not EnvRun.objects.exists()


def test_a_run_of_another_token_is_404_like_a_missing_one(api, other_api):
    run = _run(api)
    foreign = other_api.get(f"/runs/{run['id']}")
    missing = other_api.get(f"/runs/{uuid.uuid4()}")
    assert foreign.status_code == missing.status_code == 404
    assert _error(foreign) == _error(missing)
    for path in ("/close", "/submissions"):
        assert other_api.post(f"/runs/{run['id']}{path}", _group()).status_code == 404
    assert other_api.get(f"/runs/{run['id']}/rewards").status_code == 404
    assert EnvRun.objects.get(pk=run["id"]).state == "open"
    assert not EnvSubmission.objects.exists()


def test_the_token_records_its_last_use(api):
    from arena.models import ApiToken

    assert ApiToken.objects.get().last_used_at is None
    _run(api)
    first = ApiToken.objects.get().last_used_at
    assert first is not None
    _run(api)  # within the minute: not written again
    assert ApiToken.objects.get().last_used_at == first


def test_requests_over_the_rate_of_a_token_are_429_and_other_tokens_go_on(
    api, other_api, settings, frozen_clock
):
    settings.RATELIMIT_ENABLE = True
    settings.ARENA_ENV_RATE = "3/m"
    statuses = [api.get(f"/runs/{uuid.uuid4()}").status_code for _ in range(4)]
    assert statuses == [404, 404, 404, 429]
    limited = api.get(f"/runs/{uuid.uuid4()}")
    assert 1 <= int(limited["Retry-After"]) <= 60
    assert _error(api.get(f"/runs/{uuid.uuid4()}"))["code"] == "rate_limited"
    assert other_api.get(f"/runs/{uuid.uuid4()}").status_code == 404


def test_the_api_takes_no_csrf_token(api):
    api.client = Client(enforce_csrf_checks=True)
    assert api.post("/runs", {"name": "x"}).status_code == 201


# --- runs -----------------------------------------------------------------------------------


def test_a_run_is_created_with_its_hidden_model(api, monkeypatch):
    monkeypatch.setattr(
        outbound, "resolve_host", StubResolver({"trainer.example": ["93.184.215.14"]})
    )
    pool_model = ArenaModelFactory(slug="pooled")
    CompletionFactory(model=pool_model)
    live = ArenaModelFactory(slug="live", provider=ProviderFactory(), upstream_model_id="m")
    body = _run(
        api,
        references=["pooled", "live"],
        votes_per_completion=5,
        ttl_hours=24,
        share=0.5,
        webhook_url="https://trainer.example/hook",
    )
    run = EnvRun.objects.get(pk=body["id"])
    assert body["state"] == "open" and body["references"] == ["live", "pooled"]
    assert (body["votes_per_completion"], body["ttl_hours"], body["share"]) == (5, 24, 0.5)
    assert body["webhook_secret"] == run.webhook_secret and len(run.webhook_secret) == 64
    assert body["counts"]["submissions"] == 0
    model = run.model
    assert model.slug == f"env-{run.pk.hex[:12]}"
    assert model.display_name == "Submitted answer"
    assert not model.is_active and not model.is_public and model.sampling_weight == 0
    assert model.provider is None
    assert set(run.references.all()) == {pool_model, live}
    shown = api.get(f"/runs/{run.pk}").json()
    assert "webhook_secret" not in shown
    assert shown["id"] == body["id"]


def test_a_run_has_the_issue_defaults(api):
    body = _run(api)
    assert (body["votes_per_completion"], body["ttl_hours"], body["share"]) == (3, 72, 0.2)
    assert body["references"] == [] and body["webhook_url"] == ""


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": 3}, "name"),
        ({"name": "x\u0000y"}, "name"),
        ({"references": ["no-such-model"]}, "references"),
        ({"references": "pooled"}, "references"),
        ({"votes_per_completion": 0}, "votes_per_completion"),
        ({"votes_per_completion": 51}, "votes_per_completion"),
        ({"votes_per_completion": "3"}, "votes_per_completion"),
        ({"votes_per_completion": True}, "votes_per_completion"),
        ({"ttl_hours": 0}, "ttl_hours"),
        ({"ttl_hours": 721}, "ttl_hours"),
        ({"share": 0}, "share"),
        ({"share": 1.5}, "share"),
        ({"share": -0.1}, "share"),
        ({"webhook_url": "ftp://example.com/x"}, "webhook_url"),
        ({"webhook_url": "not a url"}, "webhook_url"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_each_invalid_run_field_is_a_400_naming_it(api, fields, field):
    response = api.post("/runs", {"name": "grpo", **fields})
    assert response.status_code == 400, response.content
    error = _error(response)
    assert error["field"] == field
    assert error["code"] == "invalid"
    assert not EnvRun.objects.exists()


def test_a_token_over_its_open_runs_gets_a_429_with_retry_after(api, settings):
    settings.ARENA_ENV_MAX_OPEN_RUNS = 2
    settings.ARENA_ENV_RUNS_PER_HOUR = 0
    first, _ = _run(api), _run(api)
    response = api.post("/runs", {"name": "third"})
    assert response.status_code == 429
    assert _error(response)["code"] == "too_many_runs"
    assert int(response["Retry-After"]) > 0
    assert EnvRun.objects.count() == 2
    api.post(f"/runs/{first['id']}/close")  # a closed run frees its place
    assert api.post("/runs", {"name": "third"}).status_code == 201


def test_a_token_over_its_runs_per_hour_gets_a_429_until_the_oldest_leaves_the_hour(
    api, other_api, settings
):
    settings.ARENA_ENV_MAX_OPEN_RUNS = 0
    settings.ARENA_ENV_RUNS_PER_HOUR = 2
    for _ in range(2):
        api.post(f"/runs/{_run(api)['id']}/close")
    response = api.post("/runs", {"name": "third"})
    assert response.status_code == 429
    assert _error(response)["code"] == "too_many_runs"
    assert 0 < int(response["Retry-After"]) <= 3600
    assert other_api.post("/runs", {"name": "theirs"}).status_code == 201  # per token
    EnvRun.objects.update(created_at=timezone.now() - timedelta(hours=1, seconds=1))
    assert api.post("/runs", {"name": "third"}).status_code == 201


def test_a_reference_must_be_active_and_able_to_answer(api):
    ArenaModelFactory(slug="no-answers")  # no provider and nothing in the pool
    inactive = ArenaModelFactory(slug="retired", is_active=False)
    CompletionFactory(model=inactive)
    for slug in ("no-answers", "retired"):
        response = api.post("/runs", {"name": "x", "references": [slug]})
        assert response.status_code == 400
        assert _error(response)["field"] == "references"
        assert slug in _error(response)["message"]


def test_a_body_that_is_not_json_is_a_400_naming_the_body(api):
    response = api.post("/runs", raw=b"{not json")
    assert response.status_code == 400
    assert _error(response)["field"] == "body"
    deep = b"[" * 5000 + b"]" * 5000
    assert _error(api.post("/runs", raw=deep))["field"] == "body"
    assert _error(api.post("/runs", raw=b"[1, 2]"))["field"] == "body"


def test_closing_a_run_is_idempotent(api):
    run = _run(api)
    first = api.post(f"/runs/{run['id']}/close")
    assert first.status_code == 200 and first.json()["state"] == "closed"
    again = api.post(f"/runs/{run['id']}/close")
    assert again.json()["closed_at"] == first.json()["closed_at"]


def test_an_unknown_path_and_a_wrong_method_answer_in_the_error_body(api):
    assert _error(api.get("/nothing-here"))["code"] == "not_found"
    response = api.client.delete(BASE + "/runs", headers=api.headers)
    assert response.status_code == 405
    assert _error(response)["code"] == "method_not_allowed"


def test_a_malformed_run_id_is_a_400_naming_it(api):
    response = api.get("/runs/not-a-uuid")
    assert response.status_code == 400
    assert _error(response)["field"] == "run_id"


# --- submissions ----------------------------------------------------------------------------


def test_a_submission_creates_its_group_pending_in_the_feed(api):
    run = _run(api)
    response = api.post(f"/runs/{run['id']}/submissions", _group(n=3))
    assert response.status_code == 201, response.content
    body = response.json()
    assert [c["index"] for c in body["completions"]] == [0, 1, 2]
    submission = EnvSubmission.objects.get(pk=body["id"])
    assert submission.messages == [{"role": "user", "content": "What is 2+2?"}]
    assert submission.prompt.turns == ["What is 2+2?"]
    assert submission.prompt.source == f"env:{run['id']}"
    completions = list(EnvCompletion.objects.filter(submission=submission).order_by("index"))
    assert [str(c.pk) for c in completions] == [c["id"] for c in body["completions"]]
    assert [c.seq for c in completions] == [1, 2, 3]
    assert all(c.status == "pending" for c in completions)
    assert completions[0].style is not None and completions[0].style["tokens"] > 0
    assert EnvRun.objects.get(pk=run["id"]).reward_seq == 3
    feed = api.get(f"/runs/{run['id']}/rewards").json()
    assert [r["completion_id"] for r in feed["records"]] == [c["id"] for c in body["completions"]]
    assert feed["records"][1]["meta"] == {"step": 7, "i": 1}
    assert feed["records"][0]["win_rate"] is None and feed["records"][0]["votes"] == 0
    assert feed["next_cursor"] == 3
    counts = api.get(f"/runs/{run['id']}").json()["counts"]
    assert counts["submissions"] == 1 and counts["completions"] == 3 and counts["pending"] == 3


def test_a_conversation_prompt_keeps_every_message_and_asks_the_last(api):
    run = _run(api)
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Name a prime."},
    ]
    body = api.post(f"/runs/{run['id']}/submissions", _group(prompt=prompt)).json()
    submission = EnvSubmission.objects.get(pk=body["id"])
    assert submission.messages == prompt
    assert submission.prompt.turns == ["Name a prime."]


@pytest.mark.parametrize(
    ("prompt", "field"),
    [
        ([], "prompt"),
        ([{"role": "assistant", "content": "x"}], "prompt"),
        ([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}], "prompt"),
        ([{"role": "robot", "content": "x"}], "prompt.0.role"),
        ([{"role": "user"}], "prompt.0.content"),
        ("", "prompt"),
        ("a\u0000b", "prompt"),
        ("\ud800", "prompt"),
        (7, "prompt"),
    ],
)
def test_a_bad_prompt_is_a_400_naming_it(api, prompt, field):
    run = _run(api)
    response = api.post(f"/runs/{run['id']}/submissions", _group(prompt=prompt))
    assert response.status_code == 400, response.content
    assert _error(response)["field"] == field
    assert not EnvSubmission.objects.exists() and not Prompt.objects.exists()


def test_a_replayed_key_answers_200_with_the_same_ids_and_creates_nothing(api):
    run = _run(api)
    first = api.post(f"/runs/{run['id']}/submissions", _group())
    again = api.post(f"/runs/{run['id']}/submissions", _group())
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert EnvSubmission.objects.count() == 1 and EnvCompletion.objects.count() == 2
    assert Prompt.objects.count() == 1
    assert EnvRun.objects.get(pk=run["id"]).reward_seq == 2


def test_a_replayed_key_with_another_body_is_409_naming_the_key(api):
    run = _run(api)
    api.post(f"/runs/{run['id']}/submissions", _group())
    changed = _group()
    changed["completions"][0]["meta"] = {"step": 8}
    response = api.post(f"/runs/{run['id']}/submissions", changed)
    assert response.status_code == 409
    assert _error(response) == {
        "code": "idempotency_conflict",
        "message": "This idempotency_key was used with another request body; use a new key.",
        "field": "idempotency_key",
    }
    assert EnvCompletion.objects.count() == 2


def test_the_same_key_in_another_run_is_another_submission(api):
    one, two = _run(api), _run(api)
    a = api.post(f"/runs/{one['id']}/submissions", _group())
    b = api.post(f"/runs/{two['id']}/submissions", _group())
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


def test_a_group_over_the_limit_is_400_naming_completions(api, settings):
    run = _run(api)
    response = api.post(f"/runs/{run['id']}/submissions", _group(n=17))
    assert response.status_code == 400
    assert _error(response)["field"] == "completions"
    settings.ARENA_ENV_MAX_GROUP = 2
    assert api.post(f"/runs/{run['id']}/submissions", _group(n=3)).status_code == 400
    assert api.post(f"/runs/{run['id']}/submissions", _group(n=2)).status_code == 201
    empty = api.post(f"/runs/{run['id']}/submissions", _group(key="k2", n=0))
    assert _error(empty)["field"] == "completions"
    assert not EnvSubmission.objects.filter(idempotency_key="k2").exists()


def test_an_oversize_completion_or_meta_is_400_naming_it(api, settings):
    settings.ARENA_ENV_MAX_COMPLETION_CHARS = 10
    settings.ARENA_ENV_MAX_META_BYTES = 20
    run = _run(api)
    group = _group()
    group["completions"][1]["text"] = "x" * 11
    response = api.post(f"/runs/{run['id']}/submissions", group)
    assert response.status_code == 400 and _error(response)["field"] == "completions.1.text"
    group = _group()
    group["completions"][0]["meta"] = {"tokens": list(range(20))}
    response = api.post(f"/runs/{run['id']}/submissions", group)
    assert response.status_code == 400 and _error(response)["field"] == "completions.0.meta"
    assert not EnvSubmission.objects.exists()


@pytest.mark.parametrize(
    ("completion", "field"),
    [
        ({"text": "a\u0000"}, "completions.0.text"),
        ({"text": "\udfff"}, "completions.0.text"),
        ({"text": "ok", "meta": {"k": "\u0000"}}, "completions.0.meta.k"),
        ({"text": "ok", "meta": {"\ud800": 1}}, "completions.0.meta"),
        ({"text": "ok", "meta": []}, "completions.0.meta"),
        ({"meta": {}}, "completions.0.text"),
        ({"text": "ok", "extra": 1}, "completions.0.extra"),
    ],
)
def test_an_unstorable_completion_is_400_naming_it(api, completion, field):
    run = _run(api)
    body = {"idempotency_key": "k", "prompt": "p", "completions": [completion]}
    response = api.post(f"/runs/{run['id']}/submissions", body)
    assert response.status_code == 400, response.content
    assert _error(response)["field"] == field


def test_a_body_over_the_byte_limit_is_413(api, settings):
    settings.ARENA_ENV_MAX_BODY_BYTES = 1000
    run = _run(api)
    group = _group()
    group["completions"][0]["text"] = "x" * 1000
    response = api.post(f"/runs/{run['id']}/submissions", group)
    assert response.status_code == 413
    assert _error(response)["code"] == "request_too_large"
    assert not EnvSubmission.objects.exists()


def test_a_closed_run_refuses_submissions_but_replays_old_ones(api):
    run = _run(api)
    first = api.post(f"/runs/{run['id']}/submissions", _group())
    env_run_close(run=EnvRun.objects.get(pk=run["id"]))
    response = api.post(f"/runs/{run['id']}/submissions", _group(key="new"))
    assert response.status_code == 409
    assert _error(response)["code"] == "run_closed"
    replay = api.post(f"/runs/{run['id']}/submissions", _group())
    assert replay.status_code == 200 and replay.json() == first.json()


def test_a_run_with_too_many_pending_submissions_refuses_more(api, settings):
    settings.ARENA_ENV_MAX_PENDING_SUBMISSIONS = 2
    run = _run(api)
    for key in ("a", "b"):
        assert api.post(f"/runs/{run['id']}/submissions", _group(key=key)).status_code == 201
    response = api.post(f"/runs/{run['id']}/submissions", _group(key="c"))
    assert response.status_code == 429
    assert _error(response)["code"] == "too_many_pending"
    # Once a submission is judged (no completion pending), there is room again.
    EnvCompletion.objects.filter(submission__idempotency_key="a").update(status="complete")
    assert api.post(f"/runs/{run['id']}/submissions", _group(key="c")).status_code == 201


# --- the reward feed ------------------------------------------------------------------------


def record_change(completion: EnvCompletion, **fields: Any) -> int:
    """What the reward store does when a record changes: the run's next sequence number, under
    the run's row lock, with the new values. Returns the number."""
    with transaction.atomic():
        run = EnvRun.objects.select_for_update().get(pk=completion.run_id)
        run.reward_seq += 1
        run.save(update_fields=["reward_seq"])
        EnvCompletion.objects.filter(pk=completion.pk).update(seq=run.reward_seq, **fields)
    return run.reward_seq


def _follow(api: Api, run_id: str, cursor: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    page = api.get(f"/runs/{run_id}/rewards", cursor=cursor, limit=limit)
    assert page.status_code == 200, page.content
    body = page.json()
    return body["records"], body["next_cursor"]


def test_the_feed_delivers_each_change_once_in_pages(api):
    run = _run(api)
    ids = []
    for key in ("a", "b", "c"):
        body = api.post(f"/runs/{run['id']}/submissions", _group(key=key, n=2)).json()
        ids += [c["id"] for c in body["completions"]]
    seen: list[str] = []
    records, cursor = _follow(api, run["id"], 0, 4)
    seen += [r["completion_id"] for r in records]
    # Two records change between pages: each comes again, after the rest, with its new values.
    record_change(EnvCompletion.objects.get(pk=ids[0]), votes=1, wins=1)
    record_change(EnvCompletion.objects.get(pk=ids[5]), votes=1, ties=1)
    while True:
        records, next_cursor = _follow(api, run["id"], cursor, 4)
        if not records:
            assert next_cursor == cursor
            break
        seen += [r["completion_id"] for r in records]
        cursor = next_cursor
    assert seen == ids[:4] + [ids[4], ids[0], ids[5]]
    changed = {r["completion_id"]: r for r in _follow(api, run["id"], 6, 10)[0]}
    assert changed[ids[0]]["win_rate"] == 1.0
    assert changed[ids[5]]["win_rate"] == 0.5


def test_a_reward_record_has_exactly_the_documented_fields(api):
    run = _run(api)
    body = api.post(f"/runs/{run['id']}/submissions", _group(n=1)).json()
    completion = EnvCompletion.objects.get(pk=body["completions"][0]["id"])
    record_change(
        completion,
        votes=4,
        wins=1,
        losses=1,
        ties=1,
        both_bad=1,
        score=12.5,
        score_low=-3.0,
        score_high=28.0,
        source="human",
        status="complete",
    )
    (record,), _ = _follow(api, run["id"], 1, 10)
    assert record == {
        "completion_id": str(completion.pk),
        "submission_id": body["id"],
        "meta": {"step": 7, "i": 0},
        "votes": 4,
        "wins": 1,
        "losses": 1,
        "ties": 1,
        "both_bad": 1,
        "win_rate": 0.5,
        "score": 12.5,
        "score_low": -3.0,
        "score_high": 28.0,
        "source": "human",
        "status": "complete",
    }


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"cursor": -1}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "x"}, "limit"),
    ],
)
def test_a_bad_cursor_or_limit_is_400_naming_it(api, query, field):
    run = _run(api)
    response = api.get(f"/runs/{run['id']}/rewards", **query)
    assert response.status_code == 400
    assert _error(response)["field"] == field


def test_an_unknown_query_parameter_is_400_naming_it(api):
    run = _run(api)
    response = api.get(f"/runs/{run['id']}/rewards", curosr=5)
    assert response.status_code == 400
    assert _error(response)["field"] == "curosr"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_with_one_key_create_one_group():
    """Four requests with the same key at once: one creates the group (201), the others answer
    200 with its ids; one submission, one prompt, one group's sequence numbers."""
    _, raw = token_create(name="trainer", scopes=["env"])
    run = _run(Api(raw))
    barrier = threading.Barrier(4)
    answers: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()

    def submit() -> None:
        try:
            client = Api(raw)
            barrier.wait()
            response = client.post(f"/runs/{run['id']}/submissions", _group(n=3))
            with lock:
                answers.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(status for status, _ in answers) == [200, 200, 200, 201]
    assert len({json.dumps(body, sort_keys=True) for _, body in answers}) == 1
    assert EnvSubmission.objects.count() == 1 and Prompt.objects.count() == 1
    assert sorted(EnvCompletion.objects.values_list("seq", flat=True)) == [1, 2, 3]
    assert EnvRun.objects.get(pk=run["id"]).reward_seq == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_reader_following_the_cursor_during_concurrent_changes_sees_every_change_once():
    """Three writers change records (each change under the run lock, with a vote count no
    other change uses) while a reader pages through the feed three records at a time. The
    reader meets the changes in the order of their numbers, never one twice, and ends with the
    last version of every record."""
    _, raw = token_create(name="trainer", scopes=["env"])
    api = Api(raw)
    run = _run(api)
    ids = []
    for key in range(4):
        body = api.post(f"/runs/{run['id']}/submissions", _group(key=str(key), n=4)).json()
        ids += [c["id"] for c in body["completions"]]
    seq_of = {(completion_id, 0): seq for seq, completion_id in enumerate(ids, start=1)}
    changes_per_writer = 30
    failures: list[BaseException] = []
    lock = threading.Lock()

    def writer(offset: int) -> None:
        try:
            for i in range(changes_per_writer):
                completion = EnvCompletion.objects.get(pk=ids[(offset + 3 * i) % len(ids)])
                votes = 1000 * (offset + 1) + i  # unique to this change
                seq = record_change(completion, votes=votes)
                with lock:
                    seq_of[(str(completion.pk), votes)] = seq
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    delivered: list[tuple[str, int]] = []
    cursor = 0
    while True:
        writers_done = not any(thread.is_alive() for thread in threads)
        page = api.get(f"/runs/{run['id']}/rewards", cursor=cursor, limit=3).json()
        delivered += [(r["completion_id"], r["votes"]) for r in page["records"]]
        assert page["next_cursor"] > cursor or not page["records"]
        cursor = page["next_cursor"]
        if writers_done and not page["records"]:
            break
    for thread in threads:
        thread.join()
    assert not failures
    assert len(delivered) == len(set(delivered))  # no version twice
    seqs = [seq_of[version] for version in delivered]
    assert seqs == sorted(seqs)  # in the order the changes were numbered
    latest = dict(delivered)
    final = {str(c.pk): c.votes for c in EnvCompletion.objects.filter(run_id=run["id"])}
    assert latest == final  # no record's last change was skipped
    assert cursor == EnvRun.objects.get(pk=run["id"]).reward_seq == 16 + 3 * changes_per_writer


# --- the document ---------------------------------------------------------------------------


def test_the_openapi_document_is_served_without_a_token_and_names_every_operation(db):
    response = Client().get(f"{BASE}/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "Arena environment API"
    assert set(document["paths"]) == {
        f"{BASE}/runs",
        f"{BASE}/runs/{{run_id}}",
        f"{BASE}/runs/{{run_id}}/close",
        f"{BASE}/runs/{{run_id}}/submissions",
        f"{BASE}/runs/{{run_id}}/rewards",
        f"{BASE}/runs/{{run_id}}/submissions/cancel",
        f"{BASE}/runs/{{run_id}}/submissions/{{submission_id}}/cancel",
    }
    assert document["components"]["securitySchemes"]["BearerToken"]["scheme"] == "bearer"
    record = document["components"]["schemas"]["RewardRecord"]
    assert list(record["properties"]) == [
        "completion_id",
        "submission_id",
        "meta",
        "votes",
        "wins",
        "losses",
        "ties",
        "both_bad",
        "win_rate",
        "score",
        "score_low",
        "score_high",
        "source",
        "status",
    ]


def test_the_document_refuses_blank_text_where_validation_does(db):
    schemas = Client().get(f"{BASE}/openapi.json").json()["components"]["schemas"]
    prompt_text = next(
        b
        for b in schemas["SubmissionIn"]["properties"]["prompt"]["anyOf"]
        if b.get("type") == "string"
    )
    blank_refused = [
        schemas["RunIn"]["properties"]["name"],
        schemas["SubmissionIn"]["properties"]["idempotency_key"],
        prompt_text,
        schemas["UserMessageIn"]["properties"]["content"],
    ]
    assert all(s["minLength"] == 1 and s["pattern"] == r"\S" for s in blank_refused)
    assert "pattern" not in schemas["OtherMessageIn"]["properties"]["content"]


def test_a_whole_number_written_with_a_fraction_point_is_taken(api):
    # JSON Schema's integer takes 3.0, so the document allows it.
    run = _run(api, votes_per_completion=3.0, ttl_hours=24.0)
    assert (run["votes_per_completion"], run["ttl_hours"]) == (3, 24)
    response = api.post("/runs", {"name": "x", "votes_per_completion": 2.5})
    assert _error(response)["field"] == "votes_per_completion"


def test_a_hidden_model_never_becomes_a_reference(api):
    run = _run(api)
    hidden = ArenaModel.objects.get(env_run__pk=run["id"])
    response = api.post("/runs", {"name": "x", "references": [hidden.slug]})
    assert response.status_code == 400 and _error(response)["field"] == "references"


@pytest.mark.django_db
@pytest.mark.parametrize("slug", ["a\x00b", "a\ud800b"])
def test_a_service_caller_naming_an_unstorable_reference_gets_a_400_naming_it(slug):
    token, _ = token_create(name="trainer", scopes=["env"])
    with pytest.raises(ArenaError) as refused:
        env_run_create(token=token, name="x", references=["gpt-4", slug])
    assert refused.value.status == 400
    assert refused.value.field == "references.1"
