"""arena-env: a training loop's client of the arena's environment API.

A run's completions are judged by the arena's visitors in ordinary anonymous battles; their
votes come back as reward records::

    from arena_env import ArenaEnv

    env = ArenaEnv("http://127.0.0.1:8000", token)
    run = env.create_run("my-run")
    group = env.submit(run.id, "Write a haiku about rain.", ["...", "..."])
    rewards = env.wait(run.id, group.completion_ids, timeout=600)

Adapters for TRL, Atropos and verifiers live in ``arena_env.adapters``.
"""

from arena_env.client import (
    ArenaEnv,
    ArenaEnvError,
    Completion,
    HttpResponse,
    Message,
    Prompt,
    Reward,
    RewardFeed,
    Run,
    Submission,
    Transport,
    urllib_transport,
)

__all__ = [
    "ArenaEnv",
    "ArenaEnvError",
    "Completion",
    "HttpResponse",
    "Message",
    "Prompt",
    "Reward",
    "RewardFeed",
    "Run",
    "Submission",
    "Transport",
    "urllib_transport",
]
__version__ = "0.1.0"
