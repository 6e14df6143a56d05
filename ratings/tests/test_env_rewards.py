"""Reward records of a group after votes: the fit (ratings.env_rewards), the store and its
feed numbers (environment.rewards), the after-vote task and expiry."""

import uuid
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from arena.models import Vote
from environment.models import EnvBattle, EnvCompletion, EnvRun, EnvSubmission
from environment.rewards import (
    env_completions_expire,
    env_rewards_update,
    env_submissions_behind,
)
from environment.selectors import (
    EnvGroup,
    GroupVote,
    completion_key,
    env_group,
    env_rewards_page,
    reference_key,
)
from environment.tests.env_helpers import eager_tasks, judge, make_run, side_text, submit, winner_by
from ratings import tasks
from ratings.env_rewards import env_rewards_fit
from ratings.models import LeaderboardSnapshot

__all__ = ["eager_tasks"]  # a fixture, used by name

pytestmark = pytest.mark.django_db

QUALITY = {"best answer": 3, "middle answer": 2, "worst answer": 1}


def by_quality(env, side):
    return QUALITY.get(side_text(env, side), 0)


def refresh(submission):
    return env_rewards_update(submission_id=submission.pk, fit=env_rewards_fit)


def records(submission):
    return list(EnvCompletion.objects.filter(submission=submission).order_by("index"))


def group_of(keys, votes):
    return EnvGroup(
        submission_id=uuid.uuid4(),
        completions=tuple(completion_key(k) for k in keys),
        votes=tuple(GroupVote(completion_key(a), completion_key(b), w) for a, b, w in votes),
    )


def test_a_consistent_order_gives_ordered_scores_with_mean_zero_inside_their_intervals():
    run = make_run(votes_per_completion=4)
    submission, _ = submit(run, ["best answer", "middle answer", "worst answer"])
    judge(6, winner_by(by_quality))
    refresh(submission)
    best, middle, worst = records(submission)
    assert best.score > middle.score > worst.score
    assert abs(best.score + middle.score + worst.score) < 1e-6
    for r in (best, middle, worst):
        assert r.score_low < r.score < r.score_high
        assert r.votes == r.wins + r.losses + r.ties + r.both_bad
    assert (best.wins, best.losses, worst.wins, worst.losses) == (best.votes, 0, 0, worst.votes)
    assert sum(r.votes for r in (best, middle, worst)) == 2 * 6  # each vote judges two


def test_counts_separate_ties_from_both_bad_and_both_count_as_half_a_win_in_the_fit():
    a, b, c = (uuid.uuid4() for _ in range(3))
    group = group_of(
        [a, b, c],
        [(a, b, "tie"), (a, b, "tie (bothbad)"), (b, a, "model_a"), (c, a, "model_b")],
    )
    ra, rb, rc = env_rewards_fit(group)
    assert (ra.votes, ra.wins, ra.losses, ra.ties, ra.both_bad) == (4, 1, 1, 1, 1)
    assert (rb.votes, rb.wins, rb.losses, rb.ties, rb.both_bad) == (3, 1, 0, 1, 1)
    assert (rc.votes, rc.wins, rc.losses) == (1, 0, 1)
    assert rb.score > ra.score > rc.score


def test_a_completion_that_only_won_gets_a_finite_score_from_the_prior():
    a, b, c = (uuid.uuid4() for _ in range(3))
    ra, rb, rc = env_rewards_fit(group_of([a, b, c], [(a, b, "model_a")]))
    assert ra.score is not None and rb.score is not None
    # One virtual tie each against the prior: +/-131 Elo, the figure docs/environment-api.md states.
    assert ra.score == pytest.approx(131.384, abs=0.001) and ra.score == pytest.approx(-rb.score)
    assert ra.score_low < ra.score < ra.score_high
    # An unjudged completion has no score and stays out of the mean.
    assert (rc.votes, rc.score, rc.score_low) == (0, None, None)


def test_a_win_over_a_reference_answer_counts_for_the_completion_not_for_the_reference():
    a, b = uuid.uuid4(), uuid.uuid4()
    group = EnvGroup(
        submission_id=uuid.uuid4(),
        completions=(completion_key(a), completion_key(b)),
        votes=(
            GroupVote(completion_key(a), reference_key("gpt"), "model_a"),
            GroupVote(reference_key("gpt"), completion_key(b), "model_a"),
        ),
    )
    ra, rb = env_rewards_fit(group)
    assert (ra.wins, rb.losses) == (1, 1) and ra.score > 0 > rb.score


def test_flagged_votes_do_not_count():
    run = make_run(votes_per_completion=5)
    submission, _ = submit(run, ["best answer", "worst answer"])
    judge(2, winner_by(by_quality), flagged_agent=True)
    assert Vote.objects.filter(flagged=True).count() == 2
    assert env_group(submission_id=submission.pk).votes == ()
    refresh(submission)
    assert all(r.votes == 0 and r.score is None for r in records(submission))


def test_one_address_counts_once_per_completion_however_many_sessions_it_opens(settings):
    settings.RATINGS_SOURCE_MAX_SHARE = 0.15
    settings.ARENA_ENV_SOURCE_MIN_VOTES = 1
    run = make_run(votes_per_completion=20)
    submission, _ = submit(run, ["best answer", "worst answer"])
    # Six sessions of one address vote for the worst answer; three visitors judge honestly.
    worst_first = winner_by(lambda env, side: -by_quality(env, side))
    judge(6, worst_first, prefix="rigger", ip="203.0.113.9")
    judge(3, winner_by(by_quality), prefix="honest")
    assert Vote.objects.count() == 9
    group = env_group(submission_id=submission.pk)
    assert len(group.votes) == 1 + 3
    refresh(submission)
    best, worst = records(submission)
    assert best.votes == worst.votes == 4 and best.score > worst.score


def test_a_completion_whose_only_vote_the_source_bound_left_out_is_served_again(settings):
    settings.RATINGS_SOURCE_MAX_SHARE = 0.15
    settings.ARENA_ENV_SOURCE_MIN_VOTES = 1
    run = make_run(votes_per_completion=1)
    submission, completions = submit(run, ["best answer", "middle answer", "worst answer"])
    # Two sessions of one address judge two pairs of the group: any two pairs of a group of
    # three share a completion, so the second vote is past the address's bound on it.
    judge(2, winner_by(by_quality), prefix="one-address", ip="203.0.113.9")
    assert len(env_group(submission_id=submission.pk).votes) == 1
    refresh(submission)
    unjudged = [r for r in records(submission) if r.votes == 0]
    assert len(unjudged) == 1 and unjudged[0].status == "pending"
    # A visitor from another address should be served it, and judge it.
    battles = judge(1, winner_by(by_quality), prefix="other", ip="198.51.100.7")
    assert len(battles) == 1, "no battle served: the completion has no work left"
    env = EnvBattle.objects.get(battle=battles[0])
    assert unjudged[0].pk in (env.completion_a_id, env.completion_b_id)


def test_the_source_bound_off_counts_every_vote(settings):
    settings.RATINGS_SOURCE_MAX_SHARE = 0
    run = make_run(votes_per_completion=20)
    submission, _ = submit(run, ["best answer", "worst answer"])
    judge(6, winner_by(by_quality), prefix="one-address", ip="203.0.113.9")
    assert len(env_group(submission_id=submission.pk).votes) == 6


def test_status_is_pending_until_enough_votes_then_complete():
    run = make_run(votes_per_completion=2)
    submission, _ = submit(run, ["best answer", "worst answer"])
    judge(1, winner_by(by_quality))
    refresh(submission)
    assert [r.status for r in records(submission)] == ["pending", "pending"]
    judge(1, winner_by(by_quality))
    refresh(submission)
    assert [r.status for r in records(submission)] == ["complete", "complete"]


def test_a_refit_on_the_same_votes_changes_nothing_and_a_change_takes_the_runs_next_numbers():
    run = make_run()
    submission, _ = submit(run, ["best answer", "middle answer", "worst answer"])
    judge(1, winner_by(by_quality))
    first = refresh(submission)
    assert first == 2  # the two judged completions changed, the third did not
    seqs = {r.pk: r.seq for r in records(submission)}
    assert refresh(submission) == 0
    assert {r.pk: r.seq for r in records(submission)} == seqs
    run.refresh_from_db()
    assert run.reward_seq == max(seqs.values())
    _, cursor = env_rewards_page(run=run, cursor=0, limit=1000)
    page, _ = env_rewards_page(run=run, cursor=cursor, limit=1000)
    assert page == []  # nothing is delivered twice


def test_expiry_marks_pending_records_expired_in_the_feed_but_keeps_complete_ones():
    run = make_run(votes_per_completion=1)
    submission, _ = submit(run, ["best answer", "worst answer", "middle answer"])
    judge(1, winner_by(by_quality))
    refresh(submission)
    statuses = [r.status for r in records(submission)]
    assert statuses.count("complete") == 2 and statuses.count("pending") == 1
    run.refresh_from_db()
    before = run.reward_seq
    EnvSubmission.objects.filter(pk=submission.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert env_completions_expire() == 1
    assert env_completions_expire() == 0
    [expired] = [r for r in records(submission) if r.status == "expired"]
    assert expired.seq == before + 1
    assert EnvRun.objects.get(pk=run.pk).reward_seq == before + 1
    # A refresh after expiry keeps the status.
    assert refresh(submission) == 0


def test_a_vote_on_an_env_battle_queues_its_rewards_not_the_leaderboard(
    django_capture_on_commit_callbacks,
):
    run = make_run()
    submission, _ = submit(run, ["best answer", "worst answer"])
    with (
        mock.patch.object(tasks.env_rewards_refresh, "apply_async") as env_apply,
        mock.patch.object(tasks.snapshot_refresh, "apply_async") as snapshot_apply,
        django_capture_on_commit_callbacks(execute=True),
    ):
        judge(1, winner_by(by_quality))
    env_apply.assert_called_once_with(kwargs={"submission_id": str(submission.pk)})
    snapshot_apply.assert_not_called()


def test_the_task_after_a_vote_stores_the_records_and_the_leaderboard_sees_no_env_vote(
    eager_tasks, django_capture_on_commit_callbacks, rated_models
):
    run = make_run()
    submission, _ = submit(run, ["best answer", "worst answer"])
    with django_capture_on_commit_callbacks(execute=True):
        judge(3, winner_by(by_quality))
    best, worst = records(submission)
    assert (best.votes, best.wins, worst.losses) == (3, 3, 3) and best.score > worst.score
    from ratings.services import snapshot_refresh

    snapshot = snapshot_refresh(force=True).snapshot
    assert snapshot is not None
    assert LeaderboardSnapshot.objects.count() == 1
    assert snapshot.n_votes == 60  # the 60 pool votes of rated_models; no env vote


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_stores_of_one_runs_groups_number_every_change_once_in_order():
    import threading

    from django.db import connections

    from environment.rewards import RewardUpdate, env_rewards_store

    run = make_run()
    groups = [submit(run, ["x", "y"]) for _ in range(3)]
    start_seq = EnvRun.objects.get(pk=run.pk).reward_seq
    errors: list[BaseException] = []
    changes: list[int] = []
    barrier = threading.Barrier(len(groups))

    def trainer_group(submission, completions) -> None:
        try:
            barrier.wait(timeout=10)
            for votes in range(1, 11):
                records = [
                    RewardUpdate(c.pk, votes, votes, 0, 0, 0, float(votes), 0.0, 99.0)
                    for c in completions
                ]
                changes.append(env_rewards_store(submission_id=submission.pk, records=records))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=trainer_group, args=g) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sum(changes) == 3 * 10 * 2
    run.refresh_from_db()
    seqs = sorted(EnvCompletion.objects.filter(run=run).values_list("seq", flat=True))
    assert run.reward_seq == start_seq + 60 == seqs[-1]
    assert len(set(seqs)) == len(seqs) == 6


def test_the_sweep_refits_a_group_whose_refit_was_lost(django_capture_on_commit_callbacks):
    run = make_run()
    submit(run, ["best answer", "worst answer"])
    submit(run, ["middle answer", "worst answer"])
    with (
        mock.patch.object(tasks.env_rewards_refresh, "apply_async"),  # the enqueue is lost
        django_capture_on_commit_callbacks(execute=True),
    ):
        judge(1, winner_by(by_quality))
    judged = EnvBattle.objects.get().submission_id
    assert env_submissions_behind() == [judged]
    assert tasks.env_rewards_sweep() == 1
    assert all(r.votes == 1 for r in records(EnvSubmission.objects.get(pk=judged)))
    assert env_submissions_behind() == [] and tasks.env_rewards_sweep() == 0
    # A flagged vote changes no record, so it leaves nothing behind.
    judge(1, winner_by(by_quality), flagged_agent=True)
    assert env_submissions_behind() == []
