"""A trainer's management of its runs over HTTP: listing them, cancelling pending
submissions, the lease that closes a run whose trainer stopped calling."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from arena.tests.test_settings import BASE_DIR
from arena.tokens import token_create
from config.celery_app import app
from environment.models import EnvCompletion, EnvRun, EnvSubmission
from environment.rewards import RewardUpdate, env_rewards_store, env_submissions_cancel
from environment.runs import env_runs_idle_close
from environment.serve import env_battle_serve
from environment.tests.env_helpers import make_run, submit
from environment.tests.test_env_api import BASE, Api, _error, _group, _run

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


# --- cancelling ------------------------------------------------------------------------------


def _records(api: Api, run_id: str, cursor: int = 0) -> tuple[list[dict], int]:
    page = api.get(f"/runs/{run_id}/rewards", cursor=cursor, limit=1000).json()
    return page["records"], page["next_cursor"]


def test_cancelling_a_submission_shows_its_records_cancelled_with_new_numbers(api):
    run = _run(api)
    sub = api.post(f"/runs/{run['id']}/submissions", _group(key="a", n=2)).json()
    api.post(f"/runs/{run['id']}/submissions", _group(key="b", n=2))
    _, cursor = _records(api, run["id"])
    response = api.post(f"/runs/{run['id']}/submissions/{sub['id']}/cancel")
    assert response.status_code == 200
    assert response.json() == {"submission_ids": [sub["id"]], "completions": 2}
    records, _ = _records(api, run["id"], cursor)
    assert sorted(r["completion_id"] for r in records) == sorted(
        c["id"] for c in sub["completions"]
    )
    assert {r["status"] for r in records} == {"cancelled"}
    counts = api.get(f"/runs/{run['id']}").json()["counts"]
    assert counts["cancelled"] == 2 and counts["pending"] == 2


def test_cancelling_again_changes_nothing(api):
    run = _run(api)
    sub = api.post(f"/runs/{run['id']}/submissions", _group(key="a")).json()
    api.post(f"/runs/{run['id']}/submissions/{sub['id']}/cancel")
    _, cursor = _records(api, run["id"])
    again = api.post(f"/runs/{run['id']}/submissions/{sub['id']}/cancel")
    assert again.status_code == 200
    assert again.json() == {"submission_ids": [], "completions": 0}
    assert _records(api, run["id"], cursor) == ([], cursor)


def test_cancelling_by_age_takes_only_the_older_pending_submissions(api):
    run = _run(api)
    old = api.post(f"/runs/{run['id']}/submissions", _group(key="old")).json()
    done = api.post(f"/runs/{run['id']}/submissions", _group(key="done")).json()
    new = api.post(f"/runs/{run['id']}/submissions", _group(key="new")).json()
    hour_ago = timezone.now() - timedelta(hours=1)
    EnvSubmission.objects.filter(pk__in=[old["id"], done["id"]]).update(created_at=hour_ago)
    EnvCompletion.objects.filter(submission_id=done["id"]).update(status="complete")
    response = api.post(f"/runs/{run['id']}/submissions/cancel", {"older_than_seconds": 600})
    assert response.json() == {"submission_ids": [old["id"]], "completions": 2}
    statuses = dict(
        EnvCompletion.objects.filter(run_id=run["id"])
        .values_list("submission_id", "status")
        .distinct()
    )
    assert {str(k): v for k, v in statuses.items()} == {
        old["id"]: "cancelled",
        done["id"]: "complete",
        new["id"]: "pending",
    }


def test_a_run_with_pending_submissions_cancelled_takes_submissions_again(api, settings):
    settings.ARENA_ENV_MAX_PENDING_SUBMISSIONS = 1
    run = _run(api)
    api.post(f"/runs/{run['id']}/submissions", _group(key="a"))
    assert api.post(f"/runs/{run['id']}/submissions", _group(key="b")).status_code == 429
    api.post(f"/runs/{run['id']}/submissions/cancel", {"older_than_seconds": 0})
    assert api.post(f"/runs/{run['id']}/submissions", _group(key="b")).status_code == 201


def test_a_submission_of_another_run_is_404(api):
    run = _run(api)
    other = _run(api)
    sub = api.post(f"/runs/{other['id']}/submissions", _group(key="a")).json()
    response = api.post(f"/runs/{run['id']}/submissions/{sub['id']}/cancel")
    assert response.status_code == 404
    assert EnvCompletion.objects.filter(submission_id=sub["id"], status="pending").count() == 2


@pytest.mark.parametrize(
    "body",
    [{}, {"older_than_seconds": -1}, {"older_than_seconds": "60"}, {"older_than_seconds": 1.5}],
)
def test_a_bad_cancel_body_is_400_naming_the_field(api, body):
    run = _run(api)
    response = api.post(f"/runs/{run['id']}/submissions/cancel", body)
    assert response.status_code == 400
    assert _error(response)["field"] == "older_than_seconds"


def test_a_malformed_submission_id_is_400_naming_it(api):
    run = _run(api)
    response = api.post(f"/runs/{run['id']}/submissions/not-a-uuid/cancel")
    assert response.status_code == 400
    assert _error(response)["field"] == "submission_id"


def test_a_cancelled_completion_is_no_longer_served():
    run = make_run(share=1.0)
    cancelled, _ = submit(run, ["one", "two"])
    env_submissions_cancel(run=run, submission_id=cancelled.pk)
    assert env_battle_serve(session_key="visitor") is None
    kept, _ = submit(run, ["three", "four"])
    battle = env_battle_serve(session_key="visitor")
    assert battle is not None and battle.env.submission_id == kept.pk


def test_a_late_vote_leaves_a_cancelled_record_cancelled():
    run = make_run(votes_per_completion=1)
    submission, completions = submit(run, ["one", "two"])
    env_submissions_cancel(run=run, submission_id=submission.pk)
    env_rewards_store(
        submission_id=submission.pk,
        records=[
            RewardUpdate(
                c.pk,
                votes=1,
                wins=i,
                losses=1 - i,
                ties=0,
                both_bad=0,
                score=None,
                score_low=None,
                score_high=None,
            )
            for i, c in enumerate(completions)
        ],
    )
    rows = EnvCompletion.objects.filter(submission=submission)
    assert {c.status for c in rows} == {"cancelled"}
    assert {c.votes for c in rows} == {1}


# --- every 429 says when to come back --------------------------------------------------------


def test_too_many_pending_carries_retry_after(api, settings):
    settings.ARENA_ENV_MAX_PENDING_SUBMISSIONS = 1
    run = _run(api)
    api.post(f"/runs/{run['id']}/submissions", _group(key="a"))
    response = api.post(f"/runs/{run['id']}/submissions", _group(key="b"))
    assert response.status_code == 429
    assert _error(response)["code"] == "too_many_pending"
    assert 1 <= int(response["Retry-After"]) <= 60


def test_too_many_pending_asks_for_a_retry_at_the_next_expiry_when_sooner(api, settings):
    settings.ARENA_ENV_MAX_PENDING_SUBMISSIONS = 1
    run = _run(api)
    sub = api.post(f"/runs/{run['id']}/submissions", _group(key="a")).json()
    EnvSubmission.objects.filter(pk=sub["id"]).update(
        expires_at=timezone.now() + timedelta(seconds=5)
    )
    response = api.post(f"/runs/{run['id']}/submissions", _group(key="b"))
    assert 1 <= int(response["Retry-After"]) <= 5


@pytest.mark.parametrize("cause", ["rate", "open_runs", "pending"])
def test_every_429_of_the_env_api_carries_retry_after(api, settings, frozen_clock, cause):
    settings.ARENA_ENV_MAX_PENDING_SUBMISSIONS = 1
    run = _run(api)
    api.post(f"/runs/{run['id']}/submissions", _group(key="a"))
    if cause == "rate":
        settings.RATELIMIT_ENABLE = True
        settings.ARENA_ENV_RATE = "1/m"
        api.get(f"/runs/{run['id']}")
        response = api.get(f"/runs/{run['id']}")
    elif cause == "open_runs":
        settings.ARENA_ENV_MAX_OPEN_RUNS = 1
        response = api.post("/runs", {"name": "second"})
    else:
        response = api.post(f"/runs/{run['id']}/submissions", _group(key="b"))
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1


# --- the lease -------------------------------------------------------------------------------


def _idle(run_id: object, settings, extra: int = 1) -> None:
    """Make the run's last call older than its lease."""
    ago = timedelta(seconds=settings.ARENA_ENV_RUN_IDLE_SECONDS + extra)
    EnvRun.objects.filter(pk=run_id).update(touched_at=timezone.now() - ago)


def test_a_run_whose_trainer_stopped_calling_is_not_served(settings):
    run = make_run(share=1.0)
    submit(run, ["one", "two"])
    _idle(run.pk, settings)
    assert env_battle_serve(session_key="visitor") is None
    EnvRun.objects.filter(pk=run.pk).update(touched_at=timezone.now())
    assert env_battle_serve(session_key="visitor") is not None


def test_the_sweep_closes_idle_runs_with_a_reason_and_leaves_the_others(settings):
    idle = make_run()
    live = make_run()
    _idle(idle.pk, settings)
    assert env_runs_idle_close() == 1
    idle.refresh_from_db()
    live.refresh_from_db()
    assert idle.state == "closed" and idle.closed_reason == "idle" and idle.closed_at
    assert live.state == "open"
    assert env_runs_idle_close() == 0


def test_the_sweep_runs_from_the_beat_schedule(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["arena-env-runs-idle-close"]
    assert entry["task"] == "arena.tasks.env_runs_idle_close"
    app.loader.import_default_modules()
    assert "arena.tasks.env_runs_idle_close" in app.tasks


def test_a_submission_to_a_run_closed_for_idleness_is_409_naming_its_state(api, settings):
    run = _run(api)
    _idle(run["id"], settings)
    env_runs_idle_close()
    response = api.post(f"/runs/{run['id']}/submissions", _group(key="late"))
    assert response.status_code == 409
    error = _error(response)
    assert error["code"] == "run_closed"
    assert "closed" in error["message"] and "idle" in error["message"]
    shown = api.get(f"/runs/{run['id']}").json()
    assert shown["state"] == "closed" and shown["closed_reason"] == "idle"


def test_a_call_after_the_lease_ran_out_does_not_revive_the_run(api, settings):
    run = _run(api)
    _idle(run["id"], settings)
    # Before any sweep: the trainer's late call finds its run closed for idleness.
    response = api.post(f"/runs/{run['id']}/submissions", _group(key="late"))
    assert response.status_code == 409 and "idle" in _error(response)["message"]
    assert EnvRun.objects.get(pk=run["id"]).closed_reason == "idle"


def test_every_call_on_a_run_renews_its_lease(api, settings):
    run = _run(api)
    for call in (
        lambda: api.get(f"/runs/{run['id']}"),
        lambda: api.get(f"/runs/{run['id']}/rewards"),
        lambda: api.post(f"/runs/{run['id']}/submissions", _group(key="a")),
    ):
        _idle(run["id"], settings, extra=-60)  # a minute before the lease ends
        call()
        assert env_runs_idle_close() == 0
    assert EnvRun.objects.get(pk=run["id"]).state == "open"


def test_the_idle_setting_is_refused_out_of_bounds_at_start_up():
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings.test"],
        cwd=BASE_DIR,
        env={**os.environ, "ARENA_ENV_RUN_IDLE_SECONDS": "5"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ARENA_ENV_RUN_IDLE_SECONDS must be from 60" in result.stderr


def test_a_run_staff_close_says_so_to_its_trainer(admin_client, api):
    run = _run(api)
    response = admin_client.post(
        "/admin/environment/envrun/", {"action": "close", "_selected_action": [run["id"]]}
    )
    assert response.status_code == 302
    assert api.get(f"/runs/{run['id']}").json()["closed_reason"] == "staff"
    refused = api.post(f"/runs/{run['id']}/submissions", _group(key="late"))
    assert refused.status_code == 409 and "staff" in _error(refused)["message"]
