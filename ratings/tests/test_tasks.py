"""The refresh task: its configuration, the after-commit enqueue, the admin button, a real worker."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit, urlunsplit

import pytest
from celery.schedules import crontab
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from arena.models import Vote
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import BattleFactory
from config.celery_app import app
from ratings import tasks
from ratings.models import LeaderboardSnapshot

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(autouse=True)
def no_pending_refresh():
    cache.delete(tasks.REFRESH_PENDING_KEY)
    yield
    cache.delete(tasks.REFRESH_PENDING_KEY)


def test_refresh_task_is_routed_to_the_ratings_queue_with_time_limits():
    task = app.tasks["ratings.tasks.snapshot_refresh"]
    assert 0 < task.soft_time_limit < task.time_limit
    route = app.amqp.router.route({}, "ratings.tasks.snapshot_refresh", args=(), kwargs={})
    assert route["queue"].name == "ratings"


def test_beat_sweeps_with_a_crontab_entry_that_expires():
    entry = settings.CELERY_BEAT_SCHEDULE["ratings-snapshot-sweep"]
    assert entry["task"] == "ratings.tasks.snapshot_refresh"
    assert isinstance(entry["schedule"], crontab)
    assert 0 < entry["options"]["expires"] <= 10 * 60


def test_task_writes_a_snapshot_and_a_rerun_on_the_same_votes_is_a_no_op(rated_models):
    first = tasks.snapshot_refresh.apply().get()
    second = tasks.snapshot_refresh.apply().get()

    assert first["created"] and not second["created"]
    assert first["snapshot_id"] == second["snapshot_id"]
    assert LeaderboardSnapshot.objects.count() == 1


def _ready_battle():
    battle = BattleFactory(session_key="session-1")
    terms_accept(voter_id="voter-1")
    return battle


def test_recording_a_vote_enqueues_a_refresh_only_after_commit(
    db, django_capture_on_commit_callbacks
):
    battle = _ready_battle()
    with mock.patch.object(tasks.snapshot_refresh, "apply_async") as apply_async:
        with django_capture_on_commit_callbacks(execute=True):
            vote_record(
                battle_id=battle.pk, session_key="session-1", voter_id="voter-1", winner="tie"
            )
            assert apply_async.call_count == 0  # the transaction has not committed yet
        assert apply_async.call_count == 1


def test_votes_within_the_debounce_window_share_one_delayed_refresh(
    db, settings, django_capture_on_commit_callbacks
):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.RATINGS_REFRESH_DEBOUNCE_SECONDS = 45
    battles = [_ready_battle() for _ in range(2)]
    with mock.patch.object(tasks.snapshot_refresh, "apply_async") as apply_async:
        for battle in battles:
            with django_capture_on_commit_callbacks(execute=True):
                vote_record(
                    battle_id=battle.pk,
                    session_key="session-1",
                    voter_id="voter-1",
                    winner="model_a",
                )
    assert apply_async.call_count == 1
    assert apply_async.call_args.kwargs["countdown"] == 45


@pytest.mark.parametrize("counted", [True, False])
def test_a_counted_reaction_taken_back_after_the_vote_enqueues_a_refresh_when_reactions_count(
    db, settings, django_capture_on_commit_callbacks, counted
):
    from arena.models import Reaction
    from arena.services.reactions import reaction_set

    settings.RATINGS_COUNT_REACTIONS = counted
    battle = _ready_battle()
    Reaction.objects.create(battle=battle, side="a", liked=True)
    with django_capture_on_commit_callbacks(execute=True):
        vote_record(battle_id=battle.pk, session_key="session-1", voter_id="voter-1", winner="tie")
    cache.delete(tasks.REFRESH_PENDING_KEY)  # the vote's own refresh has run
    with mock.patch.object(tasks.snapshot_refresh, "apply_async") as apply_async:
        with django_capture_on_commit_callbacks(execute=True):
            reaction_set(battle_id=battle.pk, session_key="session-1", side="a", liked=None)
    assert apply_async.call_count == (1 if counted else 0)


def test_a_failing_enqueue_does_not_fail_the_vote(db, django_capture_on_commit_callbacks, caplog):
    battle = _ready_battle()
    with (
        mock.patch.object(
            tasks.snapshot_refresh, "apply_async", side_effect=OSError("broker")
        ) as apply_async,
        django_capture_on_commit_callbacks(execute=True),
        caplog.at_level("ERROR", logger="ratings.tasks"),
    ):
        vote = vote_record(
            battle_id=battle.pk, session_key="session-1", voter_id="voter-1", winner="model_b"
        ).vote
    assert Vote.objects.filter(pk=vote.pk, winner="model_b").exists()
    assert apply_async.call_count == 1  # the receiver ran and tried to enqueue
    [record] = [r for r in caplog.records if r.name == "ratings.tasks"]
    assert record.levelname == "ERROR" and "could not enqueue" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], OSError)


def test_staff_recompute_now_enqueues_a_forced_refresh(
    admin_client, django_capture_on_commit_callbacks
):
    url = f"/{settings.ADMIN_URL}ratings/leaderboardsnapshot/recompute/"
    with (
        mock.patch.object(tasks.snapshot_refresh, "apply_async") as apply_async,
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = admin_client.post(url)
    assert response.status_code == 302
    apply_async.assert_called_once_with(kwargs={"force": True})
    page = admin_client.get(f"/{settings.ADMIN_URL}ratings/leaderboardsnapshot/")
    assert b'data-testid="recompute-now"' in page.content


def test_the_recompute_button_is_not_for_visitors(client, db):
    url = f"/{settings.ADMIN_URL}ratings/leaderboardsnapshot/recompute/"
    with mock.patch.object(tasks.snapshot_refresh, "apply_async") as apply_async:
        response = client.post(url)
    assert response.status_code == 302 and "login" in response["Location"]
    assert apply_async.call_count == 0


def test_snapshots_are_read_only_in_the_admin(admin_client, rated_models):
    snapshot = tasks.snapshot_refresh.apply().get()
    url = f"/{settings.ADMIN_URL}ratings/leaderboardsnapshot/{snapshot['snapshot_id']}/change/"
    response = admin_client.get(url)
    assert response.status_code == 200
    assert b'name="_save"' not in response.content


def _isolated_broker_url() -> str:
    """The test's Redis, on a database of its own, so no other worker takes the task."""
    parts = urlsplit(settings.REDIS_URL)
    return urlunsplit(parts._replace(path="/14"))


def _test_database_url() -> str:
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{connection.settings_dict['NAME']}"


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_writes_the_snapshot_into_postgresql(rated_models, tmp_path):
    broker = _isolated_broker_url()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": _test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": broker,
        "CELERY_TASK_ALWAYS_EAGER": "0",
    }
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                "ratings,default",
                "--pool",
                "solo",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel",
                "INFO",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        with app.connection_for_write(broker) as conn:
            tasks.snapshot_refresh.apply_async(connection=conn)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not LeaderboardSnapshot.objects.exists():
            assert worker.poll() is None, log.read_text()
            time.sleep(0.25)
        snapshot = LeaderboardSnapshot.objects.first()
        assert snapshot is not None, log.read_text()
        assert snapshot.n_votes == 60
        assert "ratings.tasks.snapshot_refresh" in log.read_text()
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)


@pytest.mark.django_db(transaction=True)
def test_without_a_broker_the_refresh_runs_in_a_background_thread_not_in_the_vote(
    settings, rated_models
):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.RATINGS_EAGER_REFRESH_IN_BACKGROUND = True
    battle = _ready_battle()
    ran_in = []
    real_apply = tasks.snapshot_refresh.apply

    def apply(*args, **kwargs):
        ran_in.append(threading.current_thread().name)
        return real_apply(*args, **kwargs)

    with mock.patch.object(tasks.snapshot_refresh, "apply", side_effect=apply):
        vote_record(battle_id=battle.pk, session_key="session-1", voter_id="voter-1", winner="tie")
        tasks._background.submit(lambda: None).result(timeout=60)  # wait for the queued run
    assert len(ran_in) == 1 and ran_in[0].startswith("ratings-refresh")
    assert LeaderboardSnapshot.objects.count() == 1
