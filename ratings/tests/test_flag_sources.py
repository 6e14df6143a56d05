"""The model-based tests and sources in ``manage.py flag_voters``' run, on the demo's 1,751 real
expert votes: honest experts keep their votes, a scripted voter who always picks the shorter
answer is flagged, and sessions from one address are tested together as one source."""

import datetime as dt
import random

import pytest
from django.core.management import call_command
from django.utils import timezone

from answer_style import conv_metadata, style_counts
from arena.models import Battle, Completion, Vote
from ratings.voters import voters_flag_run

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def demo(db):
    call_command("load_demo", verbosity=0)
    return Vote.objects.count()


def pool_votes(*, voter, n, seed, choose, ip_hash="", created_at=None, by_models=None):
    """``n`` votes by ``voter`` on random pool battles (two models' pool answers to one prompt,
    one of each model's variants, with their style counts); ``choose(style)`` picks the winner
    from the battle's counts, or ``by_models(slug_a, slug_b, style)`` when given."""
    rng = random.Random(seed)
    by_prompt = {}
    for completion in (
        Completion.objects.filter(source="pool").select_related("model").order_by("pk")
    ):
        models = by_prompt.setdefault(completion.prompt_id, {})
        models.setdefault(completion.model_id, []).append(completion)
    prompts = sorted(p for p, ms in by_prompt.items() if len(ms) >= 2)
    battles, votes = [], []
    for _ in range(n):
        variants = by_prompt[rng.choice(prompts)]
        a, b = (rng.choice(variants[m]) for m in rng.sample(sorted(variants), 2))
        style = conv_metadata(
            [style_counts(t) for t in a.turns], [style_counts(t) for t in b.turns]
        )
        battle = Battle(
            mode=Battle.Mode.ANONYMOUS,
            source=Battle.Source.POOL,
            model_a=a.model,
            model_b=b.model,
            prompt_id=a.prompt_id,
            state=Battle.State.VOTED,
        )
        battles.append(battle)
        votes.append(
            Vote(
                battle=battle,
                winner=choose(style)
                if by_models is None
                else by_models(a.model.slug, b.model.slug, style),
                voter_id=voter,
                ip_hash=ip_hash,
                user_agent_class="browser",
                style=style,
            )
        )
    Battle.objects.bulk_create(battles)
    Vote.objects.bulk_create(votes)
    if created_at is not None:
        Vote.objects.filter(voter_id=voter).update(created_at=created_at)


def shorter(style):
    return (
        "model_a"
        if style["sum_assistant_a_tokens"] <= style["sum_assistant_b_tokens"]
        else "model_b"
    )


def test_the_demos_expert_votes_are_flagged_at_most_two_per_cent(demo):
    run = voters_flag_run(dry_run=True)
    assert run.n_votes_tested == demo == 1751
    flagged = len(run.votes)
    assert flagged <= 0.02 * demo


def test_a_voter_who_always_picks_the_shorter_answer_is_flagged_with_every_vote(demo):
    pool_votes(voter="shorter", n=150, seed=3, choose=shorter)
    run = voters_flag_run(dry_run=True)
    assert list(run.voters["voter"]) == ["shorter"]
    assert (run.votes["voter"] == "shorter").sum() == 150
    assert run.voters.iloc[0]["test"] == "fit"


def test_sessions_from_one_address_are_flagged_as_one_source(demo):
    """Ten sessions of 8 votes each (below ARENA_ANOMALY_MIN_VOTES: none is tested alone), one
    address and user agent, first votes minutes apart: the source is tested and flagged."""
    start = timezone.now()
    for i in range(10):
        pool_votes(
            voter=f"sybil-{i}",
            n=8,
            seed=100 + i,
            choose=shorter,
            ip_hash="one-address",
            created_at=start + dt.timedelta(minutes=3 * i),
        )
    run = voters_flag_run(dry_run=True)
    assert list(run.voters["voter"]) == ["source:one-address:browser:1"]
    assert run.voters.iloc[0]["sessions"] == [f"sybil-{i}" for i in range(10)]
    assert run.flagged_voter_ids == [f"sybil-{i}" for i in range(10)]
    assert len(run.votes) == 80


def for_the_target(target):
    """Votes for ``target`` wherever it appears, and elsewhere for the longer answer (the
    experts' own taste on MT-bench, so that these votes blend in)."""

    def choose(a, b, style):
        if target in (a, b):
            return "model_a" if a == target else "model_b"
        longer = style["sum_assistant_a_tokens"] >= style["sum_assistant_b_tokens"]
        return "model_a" if longer else "model_b"

    return choose


@pytest.mark.parametrize("rounds", [0, 5])
def test_sessions_from_many_addresses_lifting_one_model_are_flagged_together(
    demo, monkeypatch, rounds
):
    """Ten sessions from ten addresses, 100 votes each, for alpaca-13b wherever it appears: each
    one, held out alone, is judged against a fit the other nine still pull up; leaving every
    suspect out of that fit (the rounds) catches all ten, and no expert."""
    from ratings import voters

    monkeypatch.setattr(voters, "SUSPECT_ROUNDS", rounds)
    for i in range(10):
        pool_votes(
            voter=f"lifter-{i}",
            n=100,
            seed=200 + i,
            choose=None,
            ip_hash=f"address-{i}",
            by_models=for_the_target("alpaca-13b"),
        )
    # At 1e-4, where the held-out test alone leaves some of the ten unflagged.
    run = voters_flag_run(dry_run=True, threshold=1e-4)
    lifters = [v for v in run.flagged_voter_ids if v.startswith("lifter-")]
    assert len(run.flagged_voter_ids) == len(lifters)  # no expert
    if rounds:
        assert sorted(lifters) == [f"lifter-{i}" for i in range(10)]
    else:
        assert len(lifters) < 10


def test_sessions_from_one_address_hours_apart_are_not_one_source(demo, settings):
    settings.ARENA_ANOMALY_SOURCE_WINDOW_MINUTES = 30
    start = timezone.now()
    for i in range(10):
        pool_votes(
            voter=f"sybil-{i}",
            n=8,
            seed=100 + i,
            choose=shorter,
            ip_hash="one-address",
            created_at=start + dt.timedelta(hours=i),
        )
    assert voters_flag_run(dry_run=True).voters.empty


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ARENA_ANOMALY_SOURCE_WINDOW_MINUTES", "-1"),
        ("ARENA_ANOMALY_MIN_VOTES", "0"),
        ("ARENA_ANOMALY_P_THRESHOLD", "1.5"),
    ],
)
def test_an_anomaly_setting_out_of_range_refuses_to_start_naming_it(name, value):
    from arena.tests.cli import settings_start_refusal

    settings_start_refusal(name, value)


def test_a_threshold_in_exponent_notation_is_read_as_python_reads_it():
    import subprocess
    import sys

    out = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.ARENA_ANOMALY_P_THRESHOLD)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **__import__("os").environ,
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "ARENA_ANOMALY_P_THRESHOLD": "1e-5",
        },
        check=True,
    )
    assert out.stdout.strip() == "1e-05"


def test_a_setting_that_is_not_a_number_refuses_to_start_naming_it():
    from arena.tests.cli import settings_start_refusal

    assert "must be a number" in settings_start_refusal("RATINGS_SOURCE_MAX_SHARE", "lots")
