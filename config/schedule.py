"""Every periodic job, in one place. Read by ``CELERY_BEAT_SCHEDULE`` in the settings."""

from celery.schedules import crontab

BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # The sweep behind the after-vote enqueue: a lost or debounced enqueue is picked up here.
    # A run on unchanged votes is a no-op, so the sweep costs one count query when idle.
    "ratings-snapshot-sweep": {
        "task": "ratings.tasks.snapshot_refresh",
        "schedule": crontab(minute="*/10"),
        "options": {"queue": "ratings", "expires": 9 * 60},
    },
}
