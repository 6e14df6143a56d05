"""Every periodic job, in one place. Read by ``CELERY_BEAT_SCHEDULE`` in the settings."""

BEAT_SCHEDULE: dict[str, dict[str, object]] = {}
