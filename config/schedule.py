"""Every periodic job, in one place. Read by ``CELERY_BEAT_SCHEDULE`` in the settings; each goes
to its task's queue (config/queues.py)."""

from celery.schedules import crontab

BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # The sweep behind the enqueue when an attempt ends; a no-op when no attempt ended since.
    "redteam-refit-sweep": {
        "task": "redteam.refit",
        "schedule": crontab(minute="*/15"),
        "options": {"expires": 14 * 60},
    },
    # The sweep behind the after-vote enqueue: a lost or debounced enqueue is picked up here.
    # A run on unchanged votes is a no-op, so the sweep costs one count query when idle.
    "ratings-snapshot-sweep": {
        "task": "ratings.tasks.snapshot_refresh",
        "schedule": crontab(minute="*/10"),
        "options": {"expires": 9 * 60},
    },
    # Anomalous voters (ratings.voters): voters whose votes disagree with everyone else's beyond
    # chance are flagged with their votes; a change refits the leaderboard.
    "ratings-voters-flag": {
        "task": "ratings.tasks.voters_flag",
        "schedule": crontab(minute=20, hour="*/6"),
        "options": {"expires": 5 * 60 * 60},
    },
    # Live battles a crashed or restarted server left streaming become aborted (and can be
    # regenerated or left); a battle still streaming on a live server is never that old.
    "arena-live-battles-sweep": {
        "task": "arena.tasks.live_battles_sweep",
        "schedule": crontab(minute="*/5"),
        "options": {"expires": 4 * 60},
    },
    # Images uploaded for a live prompt that no battle took: file and row deleted, each within
    # the hour of its upload (arena.live.images.UNATTACHED_IMAGE_MINUTES plus a quarter hour).
    "arena-prompt-images-sweep": {
        "task": "arena.tasks.prompt_images_sweep",
        "schedule": crontab(minute="*/15"),
        "options": {"expires": 14 * 60},
    },
    # Environment runs: pending records of expired submissions become expired (each a change in
    # the reward feed), and webhooks behind their feed are delivered again (at least once).
    "arena-env-completions-expire": {
        "task": "arena.tasks.env_completions_expire",
        "schedule": crontab(minute="*/5"),
        "options": {"expires": 4 * 60},
    },
    # Runs whose trainer made no call for ARENA_ENV_RUN_IDLE_SECONDS are closed (reason idle);
    # the serve path already skips them, so the sweep's delay costs no visitor a battle.
    "arena-env-runs-idle-close": {
        "task": "arena.tasks.env_runs_idle_close",
        "schedule": crontab(minute="*/5"),
        "options": {"expires": 4 * 60},
    },
    # A group whose after-vote refit was lost is refitted (a no-op when nothing is behind).
    "ratings-env-rewards-sweep": {
        "task": "ratings.tasks.env_rewards_sweep",
        "schedule": crontab(minute="*/5"),
        "options": {"expires": 4 * 60},
    },
    # On the webhooks queue with the deliveries it queues (config/queues.py).
    "arena-env-webhook-sweep": {
        "task": "arena.tasks.env_webhook_sweep",
        "schedule": crontab(minute="*/5"),
        "options": {"expires": 4 * 60},
    },
}

# Scheduled only while ARENA_REWARD_MODEL is on (config.settings.base): without the feature no
# worker reads the rewardmodel queue, and its messages would pile up in the broker.
REWARD_MODEL_SCHEDULE: dict[str, dict[str, object]] = {
    # A refit whose after-vote enqueue was lost (a no-op on unchanged votes), and the
    # submissions whose scoring was lost.
    "ratings-reward-model-refit": {
        "task": "ratings.tasks.reward_model_refit",
        "schedule": crontab(minute=40),
        "options": {"expires": 50 * 60},
    },
    "ratings-reward-model-score-sweep": {
        "task": "ratings.tasks.reward_model_score_sweep",
        "schedule": crontab(minute="*/5"),
        "options": {"expires": 4 * 60},
    },
}
