"""Environment battles served in place of pool battles (environment.serve)."""

import random
from collections.abc import Callable
from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from arena.api import VOTER_SESSION_KEY
from arena.identity import session_hash
from arena.models import Battle, BattleMessage, Completion, Vote
from arena.services.battles import battle_start_pool
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import (
    ArenaModelFactory,
    CompletionFactory,
    PromptFactory,
    pool_of,
)
from arena.tests.test_settings import import_production_settings
from environment.models import EnvBattle, EnvCompletion, EnvSubmission
from environment.references import references_request
from environment.runs import env_run_close
from environment.serve import env_battle_serve, env_work_available, served_hold
from environment.tests.env_helpers import make_run, side_text, submit

pytestmark = pytest.mark.django_db


def sides(battle: Battle) -> frozenset[str]:
    env = EnvBattle.objects.get(battle=battle)
    return frozenset(
        str(c) if c is not None else f"ref:{m}"
        for c, m in (
            (env.completion_a_id, battle.model_a_id),
            (env.completion_b_id, battle.model_b_id),
        )
    )


def test_without_an_open_run_a_pool_battle_costs_one_query_more_and_is_a_pool_battle():
    pool_of(n_models=2, n_prompts=1)
    run = make_run()
    submit(run, ["one", "two"])
    env_run_close(run=run)
    with CaptureQueriesContext(connection) as queries:
        battle = battle_start_pool(session_key="s1", rng=random.Random(1)).battle
    assert battle.source == Battle.Source.POOL
    env_queries = [q["sql"] for q in queries if "arena_env" in q["sql"]]
    assert len(env_queries) == 1
    assert '"arena_envrun"' in env_queries[0] and "LIMIT 1" in env_queries[0]
    assert not EnvBattle.objects.exists()


def test_a_pool_request_is_served_an_env_battle_of_the_group_exactly_like_a_pool_battle(client):
    run = make_run(share=1.0)
    submission, completions = submit(
        run,
        ["First answer.", "Second answer."],
        prompt=[
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "Earlier question"},
            {"role": "assistant", "content": "Earlier answer"},
            {"role": "user", "content": "Final question?"},
        ],
    )
    client.get("/")
    terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
    response = client.post("/api/battles", data="{}", content_type="application/json")
    assert response.status_code == 201, response.content
    payload = response.json()
    battle = Battle.objects.get(pk=payload["id"])
    assert (battle.source, battle.mode, battle.state) == ("env", "anonymous", "ready")
    assert battle.model_a_id == battle.model_b_id == run.model_id
    assert battle.prompt_id == submission.prompt_id
    # The page sees what a pool battle shows: one turn, two answers, no names, no source hint
    # beyond the payload's fields.
    assert payload["models"] is None and payload["votable"] is True
    assert payload["source"] == "pool" and payload["mode"] == "anonymous"
    [turn] = payload["turns"]
    assert turn["prompt"] == "Final question?"
    assert {turn["a"]["content"], turn["b"]["content"]} == {"First answer.", "Second answer."}
    env = EnvBattle.objects.get(battle=battle)
    assert {env.completion_a_id, env.completion_b_id} == {c.pk for c in completions}
    assert side_text(env, "a") == env.completion_a.text
    styles = BattleMessage.objects.filter(battle=battle).values_list("style", flat=True)
    assert all(style and "tokens" in style for style in styles)
    # After the vote the sides are named as the run's hidden model: "Submitted answer".
    voted = client.post(
        f"/api/battles/{battle.pk}/vote",
        data={"winner": "model_a"},
        content_type="application/json",
    )
    assert voted.status_code == 201, voted.content
    models = voted.json()["models"]
    assert models["a"]["name"] == models["b"]["name"] == "Submitted answer"
    assert voted.json()["source"] == "pool"


def test_the_share_caps_the_fraction_of_battles_from_the_run_at_every_moment():
    pool_of(n_models=3, n_prompts=3)
    run = make_run(share=0.25, votes_per_completion=50)
    submit(run, [f"answer {i}" for i in range(6)])  # 15 pairs: more than the share lets through
    rng = random.Random(3)
    for n in range(40):
        battle_start_pool(session_key=f"s{n}", rng=rng)
        env = EnvBattle.objects.filter(run=run).count()
        total = Battle.objects.count()
        assert env <= 0.25 * total
    # The cap binds: the run got its share, not less (one battle in four once it could).
    assert EnvBattle.objects.filter(run=run).count() == 10


def test_concurrent_visitors_are_spread_over_the_group_not_given_the_same_pair():
    run = make_run(share=1.0, votes_per_completion=1)
    _, completions = submit(run, ["a", "b", "c", "d"])
    first = env_battle_serve(session_key="s1", rng=random.Random(0))
    second = env_battle_serve(session_key="s2", rng=random.Random(0))
    assert first is not None and second is not None
    assert not sides(first) & sides(second)
    assert sides(first) | sides(second) == {str(c.pk) for c in completions}


def test_a_completion_with_enough_votes_and_battles_in_flight_has_no_more_work_until_the_hold_ends():
    pool_of(n_models=2, n_prompts=1)
    run = make_run(share=1.0, votes_per_completion=1)
    submit(run, ["a", "b"])
    served = env_battle_serve(session_key="s1")
    assert served is not None
    assert env_battle_serve(session_key="s2") is None
    assert battle_start_pool(session_key="s2").battle.source == Battle.Source.POOL
    with time_machine.travel(timezone.now() + served_hold() + timedelta(seconds=1)):
        again = env_battle_serve(session_key="s3")
    assert again is not None and sides(again) == sides(served)


def test_an_abandoned_battles_pair_is_served_to_the_next_visitor_once_the_hold_ends(settings):
    settings.ARENA_ENV_BATTLE_HOLD_SECONDS = 20
    run = make_run(share=1.0, votes_per_completion=5)
    submit(run, ["a", "b"])  # one pair
    abandoned = env_battle_serve(session_key="leaves")
    assert abandoned is not None
    start = timezone.now()
    with time_machine.travel(start + timedelta(seconds=19), tick=False):
        assert env_battle_serve(session_key="next") is None  # held by the first visitor
    with time_machine.travel(start + timedelta(seconds=21), tick=False):
        served = env_battle_serve(session_key="next")
    assert served is not None and sides(served) == sides(abandoned)


def test_the_default_hold_frees_an_abandoned_pair_within_a_minute():
    run = make_run(share=1.0, votes_per_completion=50)
    submit(run, ["a", "b"])
    assert env_battle_serve(session_key="leaves") is not None
    with time_machine.travel(timezone.now() + timedelta(minutes=1), tick=False):
        assert env_battle_serve(session_key="next") is not None


@pytest.mark.parametrize("value", ["0", "3601"])
def test_an_out_of_range_battle_hold_refuses_to_start_naming_the_setting(value):
    result = import_production_settings(
        "import config.settings.test", ARENA_ENV_BATTLE_HOLD_SECONDS=value
    )
    assert result.returncode != 0
    assert ImproperlyConfigured.__name__ in result.stderr
    assert "ARENA_ENV_BATTLE_HOLD_SECONDS must be from 1 to 3600" in result.stderr


def test_a_visitor_asking_for_many_battles_is_not_stalled_by_an_abandoned_one():
    run = make_run(share=1.0, votes_per_completion=2)
    submit(run, ["a", "b", "c"])  # 3 pairs, 6 judgements to give
    env_battle_serve(session_key="leaves")  # never voted
    start = timezone.now()
    voted = 0
    for n in range(14):
        at = start + timedelta(seconds=1 + 3 * n)  # 14 battles over 40 s
        with time_machine.travel(at, tick=False):
            battle = env_battle_serve(session_key="busy")
            if battle is None:
                continue
            terms_accept(voter_id="busy")
            vote_record(
                battle_id=battle.pk,
                session_key="busy",
                voter_id="busy",
                winner="tie",
                user_agent="Mozilla/5.0 (X11; Linux x86_64)",
                ip="",
            )
            voted += 1
    # Each completion gets its two counted votes: three battles; the abandoned one's pair came
    # back after the hold instead of holding two completions for minutes.
    assert voted == 3
    assert not Battle.objects.filter(session_hash=session_hash("busy"), vote__isnull=True).exists()
    for completion in EnvCompletion.objects.filter(run=run):
        involving = Q(completion_a=completion) | Q(completion_b=completion)
        assert EnvBattle.objects.filter(involving, battle__vote__isnull=False).count() == 2


def test_a_late_vote_on_an_abandoned_battle_whose_pair_was_served_again_counts(client):
    run = make_run(share=1.0, votes_per_completion=5)
    submit(run, ["a", "b"])
    client.get("/")
    terms_accept(voter_id=client.session[VOTER_SESSION_KEY])
    opened = client.post("/api/battles", data="{}", content_type="application/json")
    assert opened.status_code == 201, opened.content
    first = Battle.objects.get(pk=opened.json()["id"])
    with time_machine.travel(timezone.now() + served_hold() + timedelta(seconds=5)):
        again = env_battle_serve(session_key="next")
        assert again is not None and sides(again) == sides(first)
        voted = client.post(
            f"/api/battles/{first.pk}/vote",
            data={"winner": "model_a"},
            content_type="application/json",
        )
    assert voted.status_code == 201, voted.content
    vote = Vote.objects.get(battle=first)
    assert not vote.flagged


def test_a_session_is_not_served_the_same_pair_twice_while_another_remains():
    run = make_run(share=1.0, votes_per_completion=50)
    submit(run, ["a", "b", "c"])
    pairs = [sides(env_battle_serve(session_key="same", rng=random.Random(n))) for n in range(3)]
    assert len(set(pairs)) == 3
    # With every pair seen, the session is still served (a repeat is better than nothing).
    assert env_battle_serve(session_key="same") is not None


def test_every_pair_of_every_group_is_served_before_any_pair_is_served_again():
    run = make_run(share=1.0, votes_per_completion=50)
    groups = [submit(run, [f"group {g} answer {i}" for i in range(8)])[1] for g in range(3)]
    pairs = {frozenset((str(a.pk), str(b.pk))) for group in groups for a in group for b in group}
    pairs = {pair for pair in pairs if len(pair) == 2}  # 3 groups of 8: 84 pairs, 24 answers
    rng = random.Random(5)
    served = [sides(env_battle_serve(session_key=f"s{n}", rng=rng)) for n in range(len(pairs))]
    assert set(served) == pairs


def test_a_session_whose_votes_do_not_count_is_never_served_a_pair_twice_while_others_remain():
    run = make_run(share=1.0, votes_per_completion=50)
    submit(run, [f"answer {i}" for i in range(5)])  # 10 pairs
    rng = random.Random(7)
    served = []
    for _ in range(10):
        battle = env_battle_serve(session_key="flagged", rng=rng)
        assert battle is not None
        served.append(sides(battle))
        # Its vote is flagged: the completions stay as unjudged as before.
        Battle.objects.filter(pk=battle.pk).update(state=Battle.State.VOTED)
        Vote.objects.create(
            battle=battle, winner="tie", voter_id="v", flagged=True, flags=["too_fast"]
        )
    assert len(set(served)) == 10


def test_closed_runs_and_expired_submissions_are_not_served():
    run = make_run(share=1.0)
    submission, _ = submit(run, ["a", "b"])
    assert env_work_available()
    EnvSubmission.objects.filter(pk=submission.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert not env_work_available()
    assert env_battle_serve(session_key="s1") is None
    other = make_run(share=1.0)
    submit(other, ["c", "d"])
    env_run_close(run=other)
    assert env_battle_serve(session_key="s1") is None
    assert not env_work_available()


def test_a_group_of_one_meets_the_reference_answer_from_the_pool():
    reference = ArenaModelFactory(slug="ref-model", display_name="Reference Model")
    prompt = PromptFactory(turns=["What is rain?"], source="mt_bench")
    CompletionFactory(prompt=prompt, model=reference, turns=["Water falling from clouds."])
    run = make_run(share=1.0, references=[reference])
    submission, [completion] = submit(run, ["Wet sky."], prompt="What is rain?")
    assert env_battle_serve(session_key="s1") is None  # no opponent yet
    references_request(submission_id=submission.pk)
    battle = env_battle_serve(session_key="s1")
    assert battle is not None
    env = EnvBattle.objects.get(battle=battle)
    ref_side = "a" if env.completion_a_id is None else "b"
    assert getattr(battle, f"model_{ref_side}_id") == reference.pk
    assert side_text(env, ref_side) == "Water falling from clouds."
    assert Completion.objects.filter(
        prompt=submission.prompt, model=reference, source=Completion.Source.REFERENCE
    ).exists()


def test_the_battle_page_offers_pool_battles_when_only_env_work_exists(client, live_models):
    page = client.get("/")
    assert b'data-testid="kind-pool"' not in page.content  # live only: no choice to offer
    run = make_run(share=1.0)
    submit(run, ["a", "b"])
    page = client.get("/")
    assert b'data-testid="kind-pool"' in page.content


def test_a_trainers_prompt_is_never_offered_as_a_live_battle_suggestion():
    from arena.selectors import prompt_suggestion

    run = make_run()
    submit(run, ["a", "b"], prompt="A trainer's private prompt")
    assert prompt_suggestion() == ""
    PromptFactory(turns=["A pool question"], source="mt_bench")
    assert prompt_suggestion() == "A pool question"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_visitors_cannot_push_a_run_over_its_share():
    import threading

    from django.db import connections

    run = make_run(share=0.5, votes_per_completion=50)
    submit(run, ["a", "b", "c", "d"])
    pool_of(n_models=2, n_prompts=1)
    battle_start_pool(session_key="first")  # after it, exactly one env battle fits the share
    assert Battle.objects.count() == 1  # the ordinary battle
    barrier = threading.Barrier(6)
    served: list[object] = []

    def visitor(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            served.append(env_battle_serve(session_key=f"concurrent-{n}"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=visitor, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(served) == 6
    assert sum(b is not None for b in served) == 1
    assert EnvBattle.objects.filter(run=run).count() == 1


def _at_once(n: int, serve: Callable[[int], Battle | None]) -> list[Battle | None]:
    """``n`` sessions, each on its own database connection, call ``serve`` at the same moment."""
    import threading

    from django.db import connections

    barrier = threading.Barrier(n)
    served: list[Battle | None] = []

    def visitor(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            served.append(serve(i))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=visitor, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(served) == n
    return served


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_visitors_asking_at_once_for_a_group_of_one_pair_never_both_get_it():
    run = make_run(share=1.0, votes_per_completion=50)
    submit(run, ["a", "b"])
    served = _at_once(2, lambda i: env_battle_serve(session_key=f"at-once-{i}"))
    assert sum(b is not None for b in served) == 1
    assert EnvBattle.objects.filter(run=run).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_visitors_asking_at_once_are_never_served_the_same_pair_within_the_hold():
    run = make_run(share=1.0, votes_per_completion=50)
    submit(run, ["a", "b", "c"])  # 3 pairs for 6 visitors
    served = _at_once(6, lambda i: env_battle_serve(session_key=f"at-once-{i}"))
    got = [sides(b) for b in served if b is not None]
    assert len(got) == 3
    assert len(set(got)) == 3
