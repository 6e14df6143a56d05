"""arena-env: a training loop's client of the arena's environment API.

A run's completions are judged by the arena's visitors in ordinary anonymous battles; their
votes come back as reward records::

    from arena_env import ArenaEnv

    with ArenaEnv("http://127.0.0.1:8000", token) as env, env.start_run("my-run") as run:
        group = run.submit("Write a haiku about rain.", ["...", "..."])
        rewards = run.wait(group.completion_ids, timeout=600)
    # the run is closed here, also when the block raised

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
    RunSession,
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
    "RunSession",
    "Submission",
    "Transport",
    "urllib_transport",
]
__version__ = "0.1.0"
