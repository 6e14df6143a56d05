"""The client and its adapters against the real application on loopback (the root conftest's
``asgi_server``, PostgreSQL): a trainer submits through an adapter while simulated visitors
judge the battles they are served through the site's HTTP flow, and the adapter returns the
scores the visitors' votes give. Visitors prefer the answer with the higher ``quality N``.

Each vote's reward refit runs in the request (Celery eager for these tests), so the records
change as the visitors vote.
"""

import asyncio
from collections.abc import Iterator

import pytest
from arena_env import ArenaEnv, ArenaEnvError
from arena_env.adapters.atropos import HumanFeedbackEnv
from arena_env.adapters.trl import human_reward as trl_human_reward
from arena_env.adapters.verifiers import human_group_reward
from arena_env.adapters.verifiers import human_reward as vf_human_reward
from arena_env_visitors import by_quality, celery_eager, visitors_judging

pytestmark = pytest.mark.postgres

WAIT = 240  # seconds an adapter may wait for votes; they arrive in a few seconds here


@pytest.fixture(autouse=True)
def visitors_on_one_address(settings):
    """The simulated visitors are different people who all reach the server from loopback, one
    address: one source, whose votes on a completion would count once
    (``ARENA_ENV_SOURCE_MIN_VOTES``; the bound has its own tests)."""
    settings.ARENA_ENV_SOURCE_MIN_VOTES = 1_000_000


@pytest.fixture
def token(asgi_server) -> str:
    from arena.tokens import token_create

    _, raw = token_create(name="trainer", scopes=["env"])
    return raw


@pytest.fixture
def env(asgi_server, token, eager_tasks) -> ArenaEnv:
    return ArenaEnv(asgi_server.url, token, backoff=0.05, timeout=60)


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    with celery_eager():
        yield


def test_a_token_without_the_env_scope_is_refused_with_the_api_error(asgi_server):
    from arena.tokens import token_create

    _, raw = token_create(name="exports only", scopes=["export"])
    with pytest.raises(ArenaEnvError) as caught:
        ArenaEnv(asgi_server.url, raw).create_run("nope")
    assert caught.value.status == 403
    with pytest.raises(ArenaEnvError) as caught:
        ArenaEnv(asgi_server.url, "not-a-token").create_run("nope")
    assert caught.value.status == 401


def test_a_run_round_trips_and_a_bad_field_is_named(env):
    run = env.create_run("roundtrip", votes_per_completion=2, share=0.5)
    assert (run.name, run.state, run.votes_per_completion, run.share) == (
        "roundtrip",
        "open",
        2,
        0.5,
    )
    assert run.webhook_secret  # given once, at creation
    assert env.run(run.id).id == run.id
    assert env.close_run(run.id).state == "closed"
    with pytest.raises(ArenaEnvError) as caught:
        env.create_run("bad", share=1.5)
    assert (caught.value.status, caught.value.field) == (400, "share")


def test_a_repeated_submission_gets_the_same_ids(env):
    run = env.create_run("replay")
    first = env.submit(run.id, "Say hello.", ["hello quality 1 ", "hi quality 2 "])
    again = env.submit(run.id, "Say hello.", ["hello quality 1 ", "hi quality 2 "])
    assert again.replayed and not first.replayed
    assert (again.id, again.completion_ids) == (first.id, first.completion_ids)


def test_trl_reward_function_returns_the_visitors_scores_per_group(asgi_server, env):
    run = env.create_run("trl", votes_per_completion=2, share=1.0)
    reward = trl_human_reward(env, run.id, timeout=WAIT, poll=0.2)
    prompts = [[{"role": "user", "content": "Write a haiku about rain."}]] * 3 + [
        [{"role": "user", "content": "Name a prime number."}]
    ] * 2
    qualities = [1, 3, 2, 5, 4]
    completions = [[{"role": "assistant", "content": f"answer quality {q} "}] for q in qualities]
    with visitors_judging(asgi_server.url, by_quality) as crowd:
        scores = reward(prompts=prompts, completions=completions, completion_ids=[[1]] * 5)
    assert sum(v.votes for v in crowd) >= 4  # 3 + 1 battles complete both groups
    assert all(s is not None for s in scores), scores
    assert reward.__name__ == "human_reward"
    haiku, prime = scores[:3], scores[3:]
    assert haiku[1] > haiku[0]  # quality 3 won every vote, quality 1 lost every one
    assert prime[0] > 0 > prime[1]
    counts = env.run(run.id).counts
    assert (counts["submissions"], counts["completions"], counts["complete"]) == (2, 5, 5)


def test_trl_reward_function_gives_none_where_no_human_judged_in_time(env):
    run = env.create_run("trl-unjudged", votes_per_completion=1, share=1.0)
    reward = trl_human_reward(env, run.id, timeout=0.5, poll=0.1)
    assert reward(prompts=["Say hi."] * 2, completions=["hi quality 1 ", "hey quality 2 "]) == [
        None,
        None,
    ]


def test_atropos_style_env_collects_a_scored_group(asgi_server, env):
    run = env.create_run("atropos", votes_per_completion=2, share=1.0)
    generated: list[tuple[object, int]] = []

    async def generate(prompt: object, n: int) -> list[str]:
        generated.append((prompt, n))
        return [f"rollout quality {q} " for q in (2, 7)][:n]

    def tokenize(messages: object, text: str) -> tuple[list[int], list[int]]:
        prompt = [ord(c) for c in str(messages)]
        return prompt + [ord(c) for c in text], [-100] * len(prompt) + [ord(c) for c in text]

    loop_env = HumanFeedbackEnv(
        env,
        run.id,
        ["Describe the sea in one line."],
        generate,
        group_size=2,
        timeout=WAIT,
        tokenize=tokenize,
    )

    async def one_step() -> tuple[object, object, object]:
        item = await loop_env.get_next_item()
        group, backlog = await loop_env.collect_trajectories(item)
        return group, backlog, await loop_env.get_next_item()

    with visitors_judging(asgi_server.url, by_quality):
        group, backlog, after = asyncio.run(one_step())
    assert generated == [("Describe the sea in one line.", 2)]
    assert backlog == [] and after is None
    assert group is not None
    assert group["scores"][1] > 0 > group["scores"][0]
    assert [m[-1]["content"] for m in group["messages"]] == [
        "rollout quality 2 ",
        "rollout quality 7 ",
    ]
    assert group["messages"][0][0] == {"role": "user", "content": "Describe the sea in one line."}
    assert [o["votes"] for o in group["overrides"]] == [2, 2]
    assert group["group_overrides"]["group_size"] == 2
    assert [len(t) for t in group["tokens"]] == [len(m) for m in group["masks"]]
    assert [[m for m in masks if m != -100] for masks in group["masks"]] == [
        [ord(c) for c in "rollout quality 2 "],
        [ord(c) for c in "rollout quality 7 "],
    ]


def test_verifiers_reward_batches_concurrent_calls_of_a_prompt_into_one_group(asgi_server, env):
    run = env.create_run("verifiers", votes_per_completion=2, share=1.0)
    reward = vf_human_reward(env, run.id, timeout=WAIT, poll=0.2, window=0.5)
    prompt = [{"role": "user", "content": "Give a synonym of quick."}]
    states: list[dict] = [{}, {}, {}]

    async def score_group() -> list[float]:
        return await asyncio.gather(
            *(
                reward(
                    prompt=prompt,
                    completion=[{"role": "assistant", "content": f"fast quality {q} "}],
                    answer=None,
                    state=state,
                )
                for q, state in zip((1, 9, 5), states, strict=True)
            )
        )

    with visitors_judging(asgi_server.url, by_quality):
        scores = asyncio.run(score_group())
    assert env.run(run.id).counts["submissions"] == 1  # one group of three, not three groups
    assert scores[1] > scores[0]
    assert all(s["arena_reward"]["status"] == "complete" for s in states)
    assert [s["arena_reward"]["score"] for s in states] == scores


def test_verifiers_group_reward_scores_each_group(asgi_server, env):
    run = env.create_run("verifiers-group", votes_per_completion=1, share=1.0)
    reward = human_group_reward(env, run.id, timeout=WAIT, poll=0.2)
    with visitors_judging(asgi_server.url, by_quality):
        scores = asyncio.run(
            reward(prompts=["Say yes."] * 2, completions=["no quality 0 ", "yes quality 8 "])
        )
    assert scores[1] > 0 > scores[0]
