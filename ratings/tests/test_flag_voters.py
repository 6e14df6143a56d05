"""``manage.py flag_voters`` and the periodic task over a synthetic arena in the database: the
scripted attacker is flagged with their votes, honest voters are not, a dry run writes nothing,
and staff's clearing in the admin holds for the next run and for the leaderboard."""

from unittest import mock

import numpy as np
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from arena.models import Battle, Vote
from arena.selectors import votes_for_export, votes_for_rating
from arena.tests.factories import ArenaModelFactory
from ratings import services, tasks
from ratings.models import LeaderboardSnapshot

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

ATTACKER = "attacker"


@pytest.fixture
def arena(db):
    """20 honest voters (60 votes each, Bradley-Terry strengths, 10% ties) and one attacker who
    votes for the weakest model in each of their 50 battles. Rows written in bulk."""
    rng = np.random.default_rng(12)
    models = [ArenaModelFactory(slug=f"m{i}", display_name=f"M{i}") for i in range(5)]
    strength = np.array([0.0, 0.75, 1.5, 2.25, 3.0])
    plan = []
    for v in range(20):
        for _ in range(60):
            i, j = (int(k) for k in rng.choice(5, 2, replace=False))
            p_a = 1 / (1 + np.exp(strength[j] - strength[i]))
            roll = rng.random()
            winner = "tie" if roll < 0.1 else ("model_a" if rng.random() < p_a else "model_b")
            plan.append((f"honest-{v}", i, j, winner))
    for _ in range(50):
        other = int(rng.integers(1, 5))
        plan.append(
            (ATTACKER, 0, other, "model_a")
            if rng.random() < 0.5
            else (ATTACKER, other, 0, "model_b")
        )
    battles = Battle.objects.bulk_create(
        [
            Battle(
                mode=Battle.Mode.ANONYMOUS,
                source=Battle.Source.POOL,
                model_a=models[i],
                model_b=models[j],
                state=Battle.State.VOTED,
            )
            for _, i, j, _ in plan
        ]
    )
    Vote.objects.bulk_create(
        [
            Vote(battle=battle, winner=winner, voter_id=voter)
            for battle, (voter, _, _, winner) in zip(battles, plan, strict=True)
        ]
    )
    return models


def refresh_now(**kwargs):
    """The enqueued snapshot refresh, run in this process (no worker in the tests)."""
    return tasks.snapshot_refresh.apply(**kwargs)


def test_flag_voters_flags_the_attacker_and_their_votes_and_no_honest_voter(
    arena, capsys, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("flag_voters")
    out = capsys.readouterr().out
    assert "Tested 1250 votes; 21 voters with at least 10 votes" in out
    assert f"Anomalous voter {ATTACKER}: 50 votes" in out
    assert "honest-" not in out
    assert out.count("  vote ") == 50  # each of the attacker's votes with its p-value
    assert "50 vote(s) newly flagged anomalous_voter" in out
    flagged = Vote.objects.filter(flagged=True)
    assert set(flagged.values_list("voter_id", flat=True)) == {ATTACKER}
    assert flagged.count() == 50
    assert all(v.flags == ["anomalous_voter"] for v in flagged)
    # Out of the leaderboard and the exports by default, still on record.
    assert not votes_for_rating().filter(voter_id=ATTACKER).exists()
    assert not votes_for_export().filter(voter_id=ATTACKER).exists()
    assert votes_for_export(include_flagged=True).filter(voter_id=ATTACKER).count() == 50
    assert Vote.objects.count() == 1250


def test_a_second_run_changes_nothing(arena):
    call_command("flag_voters")
    before = list(Vote.objects.order_by("pk").values_list("flags", flat=True))
    run = tasks.voters_flag.apply().get()
    assert run == {"voters": [ATTACKER], "votes_flagged": 0}
    assert list(Vote.objects.order_by("pk").values_list("flags", flat=True)) == before


def test_dry_run_prints_the_same_voters_and_writes_nothing(arena, capsys):
    with mock.patch.object(tasks.snapshot_refresh, "apply_async") as enqueue:
        call_command("flag_voters", "--dry-run")
    out = capsys.readouterr().out
    assert f"Anomalous voter {ATTACKER}: 50 votes" in out
    assert "Dry run: 1 voter(s) would be flagged; nothing written." in out
    assert not Vote.objects.filter(flagged=True).exists()
    assert not Vote.objects.exclude(flags=[]).exists()
    enqueue.assert_not_called()


def test_a_flag_change_refits_the_leaderboard(arena, django_capture_on_commit_callbacks):
    services.snapshot_refresh()
    assert LeaderboardSnapshot.objects.latest("pk").n_votes == 1250
    with (
        mock.patch.object(tasks.snapshot_refresh, "apply_async", side_effect=refresh_now),
        django_capture_on_commit_callbacks(execute=True),
    ):
        call_command("flag_voters")
    assert LeaderboardSnapshot.objects.count() == 2
    assert LeaderboardSnapshot.objects.latest("pk").n_votes == 1200


def test_staff_clearing_holds_for_the_next_run_and_the_leaderboard(
    arena, django_capture_on_commit_callbacks
):
    call_command("flag_voters")
    staff = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-1234!")
    client = Client()
    client.force_login(staff)
    cleared = list(
        Vote.objects.filter(voter_id=ATTACKER).order_by("pk").values_list("pk", flat=True)[:5]
    )
    with (
        mock.patch.object(tasks.snapshot_refresh, "apply_async", side_effect=refresh_now),
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = client.post(
            "/admin/arena/vote/",
            {"action": "clear_anomaly_flag", "_selected_action": cleared},
        )
    assert response.status_code == 302
    for vote in Vote.objects.filter(pk__in=cleared):
        assert (vote.flagged, vote.flags, vote.flags_cleared) == (False, [], ["anomalous_voter"])
    # The leaderboard counts them again at once (the clear refitted it).
    assert LeaderboardSnapshot.objects.latest("pk").n_votes == 1205
    # Who cleared them is in each vote's admin history.
    from django.contrib.admin.models import LogEntry

    assert (
        LogEntry.objects.filter(user=staff, object_id__in=[str(pk) for pk in cleared]).count() == 5
    )

    call_command("flag_voters")
    assert not Vote.objects.filter(pk__in=cleared, flagged=True).exists()
    assert Vote.objects.filter(voter_id=ATTACKER, flagged=True).count() == 45
    assert set(votes_for_rating().filter(voter_id=ATTACKER).values_list("id", flat=True)) == set(
        cleared
    )
    refreshed = services.snapshot_refresh()
    assert refreshed.snapshot is not None and refreshed.snapshot.n_votes == 1205


def test_staff_without_the_change_permission_cannot_clear(arena):
    call_command("flag_voters")
    viewer = get_user_model().objects.create_user("viewer", "v@example.org", "pw-1234!")
    viewer.is_staff = True
    viewer.save()
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_vote"))
    client = Client()
    client.force_login(viewer)
    vote = Vote.objects.filter(voter_id=ATTACKER).first()
    client.post(
        "/admin/arena/vote/", {"action": "clear_anomaly_flag", "_selected_action": [vote.pk]}
    )
    vote.refresh_from_db()
    assert vote.flagged and vote.flags_cleared == []


def test_the_task_is_on_the_ratings_queue_with_time_limits_and_on_the_beat_schedule():
    from celery.schedules import crontab

    from config.celery_app import app

    task = app.tasks["ratings.tasks.voters_flag"]
    assert 0 < task.soft_time_limit < task.time_limit
    route = app.amqp.router.route({}, "ratings.tasks.voters_flag", args=(), kwargs={})
    assert route["queue"].name == "ratings"
    entry = settings.CELERY_BEAT_SCHEDULE["ratings-voters-flag"]
    assert entry["task"] == "ratings.tasks.voters_flag"
    assert isinstance(entry["schedule"], crontab)
    assert "queue" not in entry["options"]  # beat sends it through the routes above
