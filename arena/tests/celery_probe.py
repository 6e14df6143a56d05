"""A task for the worker-loss tests, loaded into a real worker with ``celery worker -I``.

Its first attempt records itself in Redis and then waits to be killed; a later attempt records
that it ran to the end. The Redis it writes to is named by ``ARENA_PROBE_REDIS_URL``.
"""

import os
import time

import redis
from celery import shared_task

PROBE_TASK = "arena.tests.celery_probe.probe"
ATTEMPTS_KEY = "probe:attempts"
PIDS_KEY = "probe:pids"
DONE_KEY = "probe:done"


@shared_task(name=PROBE_TASK, acks_late=True, ignore_result=True, time_limit=300)  # type: ignore[untyped-decorator]
def probe() -> None:
    client = redis.Redis.from_url(os.environ["ARENA_PROBE_REDIS_URL"])
    attempt = client.incr(ATTEMPTS_KEY)
    client.rpush(PIDS_KEY, os.getpid())
    if attempt == 1:
        time.sleep(300)  # killed by the test long before this ends
        return
    client.set(DONE_KEY, attempt)
