"""Tasks survive the death of the worker that runs them: a killed pool process hands its task
back at once, a whole worker killed leaves it to be handed out again after the broker's
visibility timeout, and no task can outlast that timeout (arena.E005).

The workers are real ``celery worker`` processes on a Redis server of the test's own, running a
probe task (``arena.tests.celery_probe``) that waits to be killed on its first attempt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import current_app
from django.core.checks import run_checks

from arena.tasks import RETRY_COUNTDOWN_MAX
from arena.tests.celery_probe import ATTEMPTS_KEY, DONE_KEY, PIDS_KEY, PROBE_TASK
from arena.tests.redis_server import own_redis  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "probe"
WAIT_SECONDS = 90


def _worker(broker_url: str, log: Path, *, pool: str, extra_env: dict[str, str] | None = None):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "CELERY_BROKER_URL": broker_url,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "ARENA_PROBE_REDIS_URL": broker_url,
        **(extra_env or {}),
    }
    out = log.open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-I",
            "arena.tests.celery_probe",
            "-Q",
            QUEUE,
            "--pool",
            pool,
            "--concurrency",
            "1",
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
        start_new_session=True,
    )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(20)


def _wait_for(condition, log: Path, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what}; worker log:\n{log.read_text()}"
        time.sleep(0.2)


def _send_probe(broker_url: str) -> None:
    with current_app.connection_for_write(broker_url) as conn:
        current_app.send_task(PROBE_TASK, queue=QUEUE, connection=conn)


@pytest.mark.redis
def test_a_task_whose_pool_process_is_killed_runs_again(own_redis, tmp_path):  # noqa: F811
    client = own_redis.client()
    log = tmp_path / "worker.log"
    worker = _worker(own_redis.url, log, pool="prefork")
    try:
        _send_probe(own_redis.url)
        _wait_for(lambda: client.llen(PIDS_KEY) == 1, log, "the first attempt never started")
        child = int(client.lindex(PIDS_KEY, 0))
        assert child != worker.pid  # the pool process, not the worker itself
        os.kill(child, signal.SIGKILL)
        _wait_for(lambda: client.get(DONE_KEY) is not None, log, "the task was not run again")
        assert int(client.get(ATTEMPTS_KEY)) == 2
    finally:
        _stop(worker)


@pytest.mark.redis
def test_the_task_of_a_killed_worker_is_handed_to_the_next_after_the_visibility_timeout(
    own_redis,  # noqa: F811
    tmp_path,
):
    client = own_redis.client()
    log = tmp_path / "worker.log"
    short = {"CELERY_VISIBILITY_TIMEOUT_SECONDS": "3"}
    first = _worker(own_redis.url, log, pool="solo", extra_env=short)
    try:
        _send_probe(own_redis.url)
        _wait_for(lambda: client.llen(PIDS_KEY) == 1, log, "the first attempt never started")
    finally:
        _stop(first)  # the whole worker, as a killed container or host loses it
    assert client.get(DONE_KEY) is None
    # kombu scans for overdue deliveries when a worker starts and then every ~100 s; the next
    # worker starts once the delivery is overdue, so that its first scan finds it.
    (_tag, delivered_at), *_ = client.zrange("unacked_index", 0, 0, withscores=True)
    _wait_for(lambda: time.time() > delivered_at + 3.5, log, "unreachable")
    second = _worker(own_redis.url, log, pool="solo", extra_env=short)
    try:
        _wait_for(lambda: client.get(DONE_KEY) is not None, log, "the task was never handed out")
        assert int(client.get(ATTEMPTS_KEY)) == 2
    finally:
        _stop(second)


def test_every_task_ends_before_the_broker_would_hand_it_out_again(settings):
    timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    tasks = {
        name: task for name, task in current_app.tasks.items() if not name.startswith("celery.")
    }
    assert "ratings.tasks.snapshot_refresh" in tasks
    for name, task in tasks.items():
        assert task.acks_late, name
        assert (task.time_limit or current_app.conf.task_time_limit) < timeout, name
    assert RETRY_COUNTDOWN_MAX < timeout
    assert current_app.conf.task_reject_on_worker_lost is True
    assert not [e for e in run_checks() if e.id == "arena.E005"]


def test_a_visibility_timeout_a_refit_can_outlast_is_refused(settings):
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
    errors = [e for e in run_checks() if e.id == "arena.E005"]
    assert len(errors) == 1
    assert "ratings.tasks.snapshot_refresh" in errors[0].msg
    assert "redteam.refit" in errors[0].msg
    assert "CELERY_VISIBILITY_TIMEOUT_SECONDS" in errors[0].hint
