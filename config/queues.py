"""Every Celery task's queue, in one table (``CELERY_TASK_ROUTES``; beat's entries and the
code that queues a task name no queue of their own). A task missing here would land on the
``default`` queue unnoticed, so a test holds the table to the registered tasks.

- ``default``: short tasks (sweeps, a group's reward refit, a reference answer).
- ``ratings``: minutes of numpy work (the leaderboard's refit, the anomaly run, the pool's
  recognisability), kept off the short tasks' queue.
- ``webhooks``: deliveries to trainers' hosts, which may never answer: a worker of their own,
  so that a dead receiver never holds up a refit.
- ``rewardmodel``: the reward model (torch on the CPU), on the one worker started where the
  reward-model extra is installed.
"""

QUEUES = ("default", "ratings", "webhooks", "rewardmodel")

TASK_QUEUES: dict[str, str] = {
    "arena.tasks.live_battles_sweep": "default",
    "arena.tasks.prompt_images_sweep": "default",
    "arena.tasks.env_reference_answer": "default",
    "arena.tasks.env_completions_expire": "default",
    "arena.tasks.env_runs_idle_close": "default",
    "ratings.tasks.env_rewards_refresh": "default",
    "ratings.tasks.env_rewards_sweep": "default",
    "ratings.tasks.snapshot_refresh": "ratings",
    "ratings.tasks.voters_flag": "ratings",
    "redteam.refit": "ratings",
    "arena.tasks.pool_recognisability": "ratings",
    "arena.tasks.env_webhook_deliver": "webhooks",
    "arena.tasks.env_webhook_sweep": "webhooks",
    "ratings.tasks.reward_model_refit": "rewardmodel",
    "ratings.tasks.reward_model_score": "rewardmodel",
    "ratings.tasks.reward_model_score_sweep": "rewardmodel",
}

TASK_ROUTES: dict[str, dict[str, str]] = {
    name: {"queue": queue} for name, queue in TASK_QUEUES.items()
}
