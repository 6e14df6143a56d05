"""A trainer's management of its runs over HTTP: listing them, cancelling pending
submissions, the lease that closes a run whose trainer stopped calling."""

from datetime import timedelta

import pytest
from django.utils import timezone

from arena.env.tokens import token_create
from arena.models import EnvRun
from arena.tests.test_env_api import BASE, Api, _error, _group, _run

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db) -> Api:
    _, raw = token_create(name="trainer", scopes=["env"])
    return Api(raw)


@pytest.fixture
def other_api(db) -> Api:
    _, raw = token_create(name="someone else", scopes=["env"])
    return Api(raw)


# --- listing ---------------------------------------------------------------------------------


def test_the_list_holds_the_tokens_own_runs_newest_first(api, other_api):
    first = _run(api, name="first")
    second = _run(api, name="second")
    _run(other_api, name="not mine")
    response = api.get("/runs")
    assert response.status_code == 200
    page = response.json()
    assert [r["id"] for r in page["runs"]] == [second["id"], first["id"]]
    assert page["next_offset"] is None


def test_the_list_pages_without_overlap(api):
    ids = [_run(api, name=f"run {i}")["id"] for i in range(5)]
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = api.get("/runs", offset=offset, limit=2).json()
        assert len(page["runs"]) <= 2
        seen += [r["id"] for r in page["runs"]]
        offset = page["next_offset"]
    assert seen == ids[::-1]


def test_a_listed_run_has_its_state_counts_and_last_activity(api):
    open_run = _run(api, name="open")
    closed = _run(api, name="closed")
    api.post(f"/runs/{closed['id']}/close")
    api.post(f"/runs/{open_run['id']}/submissions", _group(key="a", n=3))
    runs = {r["id"]: r for r in api.get("/runs").json()["runs"]}
    listed = runs[open_run["id"]]
    assert listed["state"] == "open" and listed["closed_reason"] is None
    assert listed["counts"]["submissions"] == 1
    assert listed["counts"]["pending"] == 3
    assert listed["counts"]["complete"] == listed["counts"]["votes"] == 0
    assert listed["last_activity_at"] > open_run["last_activity_at"]
    assert runs[closed["id"]]["state"] == "closed"
    assert runs[closed["id"]]["closed_reason"] == "trainer"


def test_listing_renews_no_runs_lease(api):
    run = _run(api)
    before = EnvRun.objects.get(pk=run["id"]).touched_at
    api.get("/runs")
    assert EnvRun.objects.get(pk=run["id"]).touched_at == before


def test_reading_rewards_is_activity_on_the_run(api):
    run = _run(api)
    EnvRun.objects.filter(pk=run["id"]).update(touched_at=timezone.now() - timedelta(minutes=5))
    api.get(f"/runs/{run['id']}/rewards")
    assert EnvRun.objects.get(pk=run["id"]).touched_at > timezone.now() - timedelta(minutes=1)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"offset": -1}, "offset"),
        ({"page": 2}, "page"),
    ],
)
def test_a_bad_list_query_is_400_naming_it(api, query, field):
    response = api.get("/runs", **query)
    assert response.status_code == 400
    assert _error(response)["field"] == field


def test_the_list_needs_a_token(db):
    response = Api(None).get("/runs")
    assert response.status_code == 401


def test_the_document_describes_the_list(db):
    from django.test import Client

    document = Client().get(f"{BASE}/openapi.json").json()
    operation = document["paths"][f"{BASE}/runs"]["get"]
    assert operation["operationId"] == "list_runs"
    summary = document["components"]["schemas"]["RunSummary"]
    assert {"state", "counts", "last_activity_at", "closed_reason"} <= set(summary["properties"])
