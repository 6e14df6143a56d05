"""Signed, retried webhook deliveries of changed reward records (environment.webhook)."""

import os
import socket
import subprocess
import sys
from unittest import mock

import pytest
from django.core.cache import cache

from environment import rewards, webhook
from environment.models import EnvRun
from environment.rewards import RewardUpdate, env_rewards_store
from environment.selectors import env_rewards_page
from environment.tasks import env_webhook_deliver, env_webhook_sweep
from environment.tests.env_helpers import eager_tasks, make_run, submit
from environment.tests.outbound_helpers import LOOPBACK_ALLOWED
from environment.tests.webhook_receiver import WebhookReceiver
from environment.webhook import WebhookFailed, webhook_deliver, webhook_runs_behind

__all__ = ["eager_tasks"]  # a fixture, used by name

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback_allowed(settings):
    """The receivers here listen on loopback, which the guard refuses unless allowed."""
    for name, value in LOOPBACK_ALLOWED.items():
        setattr(settings, name, value)


@pytest.fixture
def receiver():
    with WebhookReceiver() as r:
        yield r


def feed(run, cursor=0):
    records, _ = env_rewards_page(run=run, cursor=cursor, limit=1000)
    return records


def test_changed_records_are_posted_signed_in_feed_order_and_acknowledged(receiver):
    run = make_run(webhook_url=receiver.url)
    submit(run, ["a", "b", "c"])
    assert webhook_deliver(run_id=run.pk) == 3
    [delivery] = receiver.deliveries
    assert delivery.signed_by(run.webhook_secret)
    assert not delivery.signed_by("another secret")
    body = delivery.payload
    assert body["id"] == f"{run.pk}:1-3" == delivery.headers["x-arena-delivery"]
    assert body["run_id"] == str(run.pk)
    assert body["records"] == feed(run)  # exactly the rewards feed's records
    assert delivery.headers["content-type"] == "application/json"
    run.refresh_from_db()
    assert run.webhook_seq == 3 == run.reward_seq
    # Nothing new: nothing sent.
    assert webhook_deliver(run_id=run.pk) == 0
    assert len(receiver.deliveries) == 1


def test_records_go_in_batches_each_with_its_own_id(receiver, monkeypatch):
    monkeypatch.setattr(webhook, "WEBHOOK_BATCH", 2)
    run = make_run(webhook_url=receiver.url)
    submit(run, ["a", "b", "c"])
    assert webhook_deliver(run_id=run.pk) == 3
    assert [d.payload["id"] for d in receiver.deliveries] == [f"{run.pk}:1-2", f"{run.pk}:3-3"]
    assert [len(d.payload["records"]) for d in receiver.deliveries] == [2, 1]


def test_a_refused_batch_is_not_acknowledged_and_is_sent_again_with_the_same_id(receiver):
    run = make_run(webhook_url=receiver.url)
    submit(run, ["a", "b"])
    receiver.statuses = [500]
    with pytest.raises(WebhookFailed, match="HTTP 500"):
        webhook_deliver(run_id=run.pk)
    assert EnvRun.objects.get(pk=run.pk).webhook_seq == 0
    assert webhook_runs_behind() == [run.pk]
    assert webhook_deliver(run_id=run.pk) == 2
    first, second = receiver.deliveries
    assert first.payload == second.payload and first.body == second.body
    assert webhook_runs_behind() == []


def test_an_unreachable_receiver_is_a_failed_delivery():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run = make_run(webhook_url=f"http://127.0.0.1:{port}/hook")
    submit(run, ["a"])
    with pytest.raises(WebhookFailed):
        webhook_deliver(run_id=run.pk)
    assert EnvRun.objects.get(pk=run.pk).webhook_seq == 0


def test_a_changed_record_is_delivered_again_with_its_new_state(
    receiver, django_capture_on_commit_callbacks, eager_tasks
):
    run = make_run(webhook_url=receiver.url)
    _, (a, b) = submit(run, ["a", "b"])
    webhook_deliver(run_id=run.pk)
    update = RewardUpdate(
        completion_id=a.pk,
        votes=1,
        wins=1,
        losses=0,
        ties=0,
        both_bad=0,
        score=80.0,
        score_low=-100.0,
        score_high=260.0,
    )
    with django_capture_on_commit_callbacks(execute=True):
        env_rewards_store(submission_id=a.submission_id, records=[update])
    # Stored, then (after commit) the task delivered the one changed record.
    last = receiver.deliveries[-1].payload
    assert last["id"] == f"{run.pk}:3-3"
    [record] = last["records"]
    assert (record["completion_id"], record["votes"], record["score"]) == (str(a.pk), 1, 80.0)
    assert EnvRun.objects.get(pk=run.pk).webhook_seq == 3


def test_a_run_without_a_webhook_queues_nothing(django_capture_on_commit_callbacks):
    run = make_run()
    _, (a,) = submit(run, ["a"])
    update = RewardUpdate(a.pk, 1, 1, 0, 0, 0, 10.0, 0.0, 20.0)
    with (
        mock.patch.object(rewards, "webhook_enqueue") as enqueue,
        django_capture_on_commit_callbacks(execute=True),
    ):
        env_rewards_store(submission_id=a.submission_id, records=[update])
    enqueue.assert_not_called()
    assert webhook_deliver(run_id=run.pk) == 0
    # The same store on a run with a webhook does queue a delivery.
    EnvRun.objects.filter(pk=run.pk).update(webhook_url="http://127.0.0.1:9/hook")
    update = RewardUpdate(a.pk, 2, 2, 0, 0, 0, 10.0, 0.0, 20.0)
    with (
        mock.patch.object(rewards, "webhook_enqueue") as enqueue,
        django_capture_on_commit_callbacks(execute=True),
    ):
        env_rewards_store(submission_id=a.submission_id, records=[update])
    enqueue.assert_called_once_with(run_id=run.pk)


def test_the_task_retries_a_failed_delivery_with_back_off(receiver):
    run = make_run(webhook_url=receiver.url)
    submit(run, ["a"])
    receiver.statuses = [503]
    with (
        mock.patch.object(env_webhook_deliver, "retry", side_effect=RuntimeError("retry")) as retry,
        pytest.raises(RuntimeError, match="retry"),
    ):
        env_webhook_deliver.run(run_id=str(run.pk))
    assert retry.call_args.kwargs["countdown"] == 30
    assert isinstance(retry.call_args.kwargs["exc"], WebhookFailed)
    # While the retry waits the sweep leaves the run alone (one chain of retries at a time).
    assert webhook_runs_behind() == []
    assert env_webhook_deliver.run(run_id=str(run.pk)) == 1  # the retry: acknowledged
    assert webhook_runs_behind() == []
    submit(run, ["b"])
    assert webhook_runs_behind() == [run.pk]  # the mark went with the success


def test_a_delivery_that_gives_up_leaves_the_run_to_a_later_sweep(receiver, caplog):
    run = make_run(webhook_url=receiver.url)
    submit(run, ["a"])
    receiver.statuses = [500]
    with (
        mock.patch.object(env_webhook_deliver, "max_retries", 0),
        caplog.at_level("WARNING", logger="arena.tasks"),
    ):
        assert env_webhook_deliver.run(run_id=str(run.pk)) == 0
    assert "gave up" in caplog.text
    assert webhook_runs_behind() == []
    cache.clear()  # the pause is over
    assert webhook_runs_behind() == [run.pk]


def test_without_a_broker_a_failed_delivery_is_logged_and_left_for_the_sweep(
    receiver, eager_tasks, caplog
):
    run = make_run(webhook_url=receiver.url)
    submit(run, ["a"])
    receiver.statuses = [500]
    with caplog.at_level("WARNING", logger="arena.tasks"):
        env_webhook_deliver.apply(kwargs={"run_id": str(run.pk)})
    assert "webhook delivery" in caplog.text
    assert len(receiver.deliveries) == 1
    assert env_webhook_sweep.apply().get() == 1  # the sweep queues it again: delivered now
    assert len(receiver.deliveries) == 2
    assert EnvRun.objects.get(pk=run.pk).webhook_seq == 1
    assert env_webhook_sweep.apply().get() == 0


def test_the_env_tasks_are_scheduled_and_registered_in_a_web_process_too(settings):
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {
        "arena.tasks.env_completions_expire",
        "arena.tasks.env_webhook_sweep",
        "ratings.tasks.env_rewards_sweep",
    } <= scheduled
    # A process that only set Django up (a web server) must know the tasks the env services
    # queue by name, without a worker's autodiscovery.
    code = (
        "import django; django.setup(); from celery import current_app; "
        "names = ('arena.tasks.env_webhook_deliver', 'arena.tasks.env_reference_answer'); "
        "print(all(n in current_app.tasks for n in names))"
    )
    out = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test"},
        check=True,
    )
    assert out.stdout.strip() == "True"


def _queue_of(name):
    from config.celery_app import app

    return app.amqp.router.route({}, name)["queue"].name


def test_the_webhook_tasks_are_routed_to_their_own_queue(settings):
    assert _queue_of("arena.tasks.env_webhook_deliver") == "webhooks"
    assert _queue_of("arena.tasks.env_webhook_sweep") == "webhooks"
    for name in ("ratings.tasks.snapshot_refresh", "ratings.tasks.env_rewards_refresh"):
        assert _queue_of(name) != "webhooks"
    [sweep] = [
        entry
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if entry["task"] == "arena.tasks.env_webhook_sweep"
    ]
    assert "queue" not in sweep["options"]  # beat sends it through the routes above


@pytest.mark.redis
def test_a_refit_is_not_queued_behind_webhook_deliveries(settings):
    import json

    import redis

    from config.celery_app import app

    if app.conf.task_always_eager:
        pytest.skip("needs the Redis broker (REDIS_URL)")
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queues = ("webhooks", "default", "ratings")
    client.delete(*queues)
    try:
        for _ in range(3):
            env_webhook_deliver.apply_async(
                kwargs={"run_id": "00000000-0000-0000-0000-000000000000"}
            )
        env_webhook_sweep.apply_async()
        # Queued as the vote's refit queues it (ratings.tasks), by name.
        app.send_task(
            "ratings.tasks.env_rewards_refresh", kwargs={"submission_id": "x"}, queue="default"
        )
        app.send_task("ratings.tasks.snapshot_refresh")

        def names(queue):
            return [json.loads(raw)["headers"]["task"] for raw in client.lrange(queue, 0, -1)]

        assert set(names("webhooks")) == {
            "arena.tasks.env_webhook_deliver",
            "arena.tasks.env_webhook_sweep",
        }
        assert names("default") == ["ratings.tasks.env_rewards_refresh"]
        assert names("ratings") == ["ratings.tasks.snapshot_refresh"]
    finally:
        client.delete(*queues)
        client.close()
