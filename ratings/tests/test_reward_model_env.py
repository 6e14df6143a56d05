"""Model rewards in the environment API, with a fake embedder (no torch): the 409 where the
reward model cannot run, the records' source, their supersession by the humans' in the feed,
the refit's snapshot, and the active selection of what visitors are served."""

import hashlib
import json
import uuid

import numpy as np
import pytest
from django.test import Client

from arena.models import Vote
from arena.services.terms import terms_accept
from arena.tokens import token_create
from environment import model_rewards
from environment.model_rewards import ModelReward, env_model_rewards_store
from environment.models import EnvBattle, EnvCompletion, EnvRun
from environment.rewards import RewardUpdate, env_rewards_store
from environment.selectors import env_rewards_page
from environment.serve import env_battle_serve
from environment.tests.env_helpers import eager_tasks, judge, make_run, side_text, submit, winner_by
from ratings import tasks
from ratings.models import RewardModelSnapshot
from ratings.reward_model import embedding
from ratings.reward_model.services import reward_model_unavailable

__all__ = ["eager_tasks"]  # a fixture, used by name

pytestmark = pytest.mark.django_db

BASE = "/api/env/v1"


def fake_embed(texts):
    """A deterministic stand-in for MiniLM: unit vectors from the texts' hashes, with a
    component that grows with length (so the head has something to learn)."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        v = np.random.default_rng(seed).normal(size=embedding.EMBEDDING_DIM)
        v[0] = len(text) / 10.0
        rows.append(v / np.linalg.norm(v))
    return np.array(rows).reshape(len(texts), embedding.EMBEDDING_DIM)


@pytest.fixture
def fake_model(settings, monkeypatch, eager_tasks):
    """The reward model on, its extra "installed", the embedder the fake above."""
    settings.ARENA_REWARD_MODEL = True
    monkeypatch.setattr(embedding, "unavailable_reason", lambda: None)
    monkeypatch.setattr(embedding, "embed", fake_embed)


class Api:
    def __init__(self) -> None:
        _, raw = token_create(name=f"trainer-{uuid.uuid4().hex[:6]}", scopes=["env"])
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {raw}"}

    def post(self, path, body):
        return self.client.post(
            BASE + path, json.dumps(body), content_type="application/json", headers=self.headers
        )

    def get(self, path, **query):
        return self.client.get(BASE + path, query, headers=self.headers)


def _feed(api, run_id, cursor=0):
    body = api.get(f"/runs/{run_id}/rewards", cursor=cursor, limit=1000).json()
    return body["records"], body["next_cursor"]


# --- unavailable: a clear 4xx, nothing created ------------------------------------------------


def test_with_the_setting_off_reward_model_is_a_409_naming_the_field_and_nothing_is_created(
    settings,
):
    settings.ARENA_REWARD_MODEL = False
    api = Api()
    response = api.post("/runs", {"name": "r", "reward_model": True})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "reward_model_unavailable"
    assert error["field"] == "reward_model"
    assert "ARENA_REWARD_MODEL is off" in error["message"]
    assert not EnvRun.objects.exists()


def test_without_the_extra_reward_model_is_a_409_that_says_which_packages_are_missing(
    settings, monkeypatch
):
    settings.ARENA_REWARD_MODEL = True
    monkeypatch.setattr(embedding, "EXTRA_PACKAGES", ("torch", "no_such_package_arena_test"))
    api = Api()
    response = api.post("/runs", {"name": "r", "reward_model": True})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["field"] == "reward_model"
    assert "reward-model extra is not installed" in error["message"]
    assert "no_such_package_arena_test" in error["message"]
    assert not EnvRun.objects.exists()


def test_the_real_check_names_the_missing_extra_exactly_when_a_package_of_it_is_missing(settings):
    import importlib.util

    settings.ARENA_REWARD_MODEL = True
    missing = [p for p in embedding.EXTRA_PACKAGES if importlib.util.find_spec(p) is None]
    reason = reward_model_unavailable()
    assert (reason is None) == (not missing)
    for package in missing:
        assert package in reason


def test_without_a_registered_reward_model_the_arena_says_none_is_installed(monkeypatch):
    monkeypatch.setattr(model_rewards, "_unavailable", None)
    assert model_rewards.model_rewards_unavailable() == model_rewards.NOT_INSTALLED


def test_a_run_without_reward_model_is_created_as_before_and_says_so(settings):
    settings.ARENA_REWARD_MODEL = False
    api = Api()
    response = api.post("/runs", {"name": "r"})
    assert response.status_code == 201
    assert response.json()["reward_model"] is False


def test_reward_model_must_be_a_boolean():
    api = Api()
    response = api.post("/runs", {"name": "r", "reward_model": "yes"})
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "reward_model"


# --- model records at once, and the humans' superseding them ---------------------------------


def test_a_model_run_gets_model_records_with_intervals_at_once(
    fake_model, django_capture_on_commit_callbacks
):
    api = Api()
    run = api.post("/runs", {"name": "r", "reward_model": True}).json()
    assert run["reward_model"] is True
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            f"/runs/{run['id']}/submissions",
            {
                "idempotency_key": "k",
                "prompt": "Explain rain.",
                "completions": [{"text": "Short."}, {"text": "A longer answer about rain."}],
            },
        )
    body = response.json()
    records, _ = _feed(api, run["id"])
    latest = {r["completion_id"]: r for r in records}
    assert set(latest) == {c["id"] for c in body["completions"]}
    for record in latest.values():
        assert record["source"] == "model"
        assert record["status"] == "pending"
        assert record["votes"] == 0
        assert record["score_low"] < record["score"] < record["score_high"]
    # On the humans' scale: Elo points around the group's mean.
    assert sum(r["score"] for r in latest.values()) == pytest.approx(0.0, abs=1e-4)
    snapshot = RewardModelSnapshot.objects.get()
    assert set(
        EnvCompletion.objects.filter(run_id=run["id"]).values_list("model_snapshot_id", flat=True)
    ) == {snapshot.pk}


def test_a_run_without_reward_model_gets_no_model_record(
    fake_model, django_capture_on_commit_callbacks
):
    api = Api()
    run = api.post("/runs", {"name": "r"}).json()
    with django_capture_on_commit_callbacks(execute=True):
        api.post(
            f"/runs/{run['id']}/submissions",
            {"idempotency_key": "k", "prompt": "Hi", "completions": [{"text": "a"}, {"text": "b"}]},
        )
    records, _ = _feed(api, run["id"])
    assert [r["source"] for r in records] == [None, None]
    assert not RewardModelSnapshot.objects.exists()


QUALITY = {"best answer": 3, "middle answer": 2, "worst answer": 1}


def by_quality(env, side):
    return QUALITY.get(side_text(env, side), 0)


def test_the_humans_records_supersede_the_models_and_come_once_each_in_the_feed(
    fake_model, django_capture_on_commit_callbacks
):
    run = make_run(votes_per_completion=2)
    EnvRun.objects.filter(pk=run.pk).update(reward_model=True)
    run.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        submission, completions = submit(run, ["best answer", "middle answer", "worst answer"])
    records, cursor = env_rewards_page(run=run, cursor=0)
    assert [r["source"] for r in records] == ["model"] * 3
    model_scores = {r["completion_id"]: r["score"] for r in records}
    with django_capture_on_commit_callbacks(execute=True):
        judge(6, winner_by(by_quality))
    changed, after = env_rewards_page(run=run, cursor=cursor)
    assert after > cursor
    # Every record the humans scored comes again, once, with the humans' score.
    assert len({r["completion_id"] for r in changed}) == len(changed)
    latest = {r["completion_id"]: r for r in changed}
    assert {r["source"] for r in latest.values()} == {"human"}
    best = latest[str(completions[0].pk)]
    worst = latest[str(completions[2].pk)]
    assert best["score"] > worst["score"]
    assert best["votes"] >= 1
    # The model's own reward is kept apart, as it was.
    kept = EnvCompletion.objects.get(pk=completions[0].pk)
    assert kept.model_score == pytest.approx(model_scores[str(completions[0].pk)])
    # Nothing more to read: the cursor neither skips nor repeats.
    assert env_rewards_page(run=run, cursor=after) == ([], after)


def _rewards(completions, widths, scores=None):
    scores = scores or [0.0] * len(completions)
    return [
        ModelReward(completion_id=c.pk, score=s, score_low=s - w / 2, score_high=s + w / 2)
        for c, w, s in zip(completions, widths, scores, strict=True)
    ]


def test_a_group_refit_without_a_human_score_keeps_showing_the_models_record():
    run = make_run()
    submission, completions = submit(run, ["a", "b"])
    env_model_rewards_store(
        submission_id=submission.pk,
        rewards=_rewards(completions, [40.0, 60.0], [10.0, -10.0]),
        snapshot_id=7,
    )
    human = RewardUpdate(completions[0].pk, 1, 1, 0, 0, 0, 131.0, 20.0, 240.0)
    unjudged = RewardUpdate(completions[1].pk, 0, 0, 0, 0, 0, None, None, None)
    env_rewards_store(submission_id=submission.pk, records=[human, unjudged])
    first, second = (EnvCompletion.objects.get(pk=c.pk) for c in completions)
    assert (first.source, first.score, first.score_low) == ("human", 131.0, 20.0)
    assert (second.source, second.score, second.score_low, second.score_high) == (
        "model",
        -10.0,
        -40.0,
        20.0,
    )
    # A later model rewards' store does not take the humans' record back.
    changed = env_model_rewards_store(
        submission_id=submission.pk,
        rewards=_rewards(completions, [10.0, 10.0], [1.0, -1.0]),
        snapshot_id=8,
    )
    first.refresh_from_db()
    assert changed == 1
    assert (first.source, first.score, first.model_score) == ("human", 131.0, 1.0)


def test_storing_the_same_model_rewards_again_changes_nothing():
    run = make_run()
    submission, completions = submit(run, ["a", "b"])
    rewards = _rewards(completions, [40.0, 60.0])
    assert env_model_rewards_store(submission_id=submission.pk, rewards=rewards, snapshot_id=1) == 2
    seq = EnvRun.objects.get(pk=run.pk).reward_seq
    assert env_model_rewards_store(submission_id=submission.pk, rewards=rewards, snapshot_id=1) == 0
    assert EnvRun.objects.get(pk=run.pk).reward_seq == seq


# --- refits ------------------------------------------------------------------------------------


def test_the_refit_task_writes_a_snapshot_from_the_votes_and_reruns_as_a_no_op(fake_model):
    run = make_run(votes_per_completion=3)
    submit(run, ["best answer", "middle answer", "worst answer"])
    judge(6, winner_by(by_quality))
    first = tasks.reward_model_refit.apply().get()
    snapshot = RewardModelSnapshot.objects.get(pk=first)
    assert snapshot.n_votes == Vote.objects.count() >= 3
    assert snapshot.spec["embedding"] == embedding.MODEL_NAME
    assert len(bytes(snapshot.weights)) > 0
    assert tasks.reward_model_refit.apply().get() == first
    assert RewardModelSnapshot.objects.count() == 1
    # A vote flagged since is left out: a new snapshot, on one pair fewer.
    Vote.objects.filter(pk=Vote.objects.order_by("id").values("id")[:1]).update(flagged=True)
    second = tasks.reward_model_refit.apply().get()
    assert second != first
    assert RewardModelSnapshot.objects.get(pk=second).n_votes == snapshot.n_votes - 1
    with pytest.raises(Exception, match="immutable"):
        snapshot.save()


def test_the_refit_task_does_nothing_while_the_setting_is_off(settings):
    settings.ARENA_REWARD_MODEL = False
    assert tasks.reward_model_refit.apply().get() is None
    assert not RewardModelSnapshot.objects.exists()


def test_a_vote_queues_a_refit_while_the_reward_model_is_on(
    fake_model, settings, django_capture_on_commit_callbacks
):
    settings.RATINGS_EAGER_REFRESH_IN_BACKGROUND = False
    run = make_run(votes_per_completion=1)
    submit(run, ["best answer", "worst answer"])
    with django_capture_on_commit_callbacks(execute=True):
        judge(1, winner_by(by_quality))
    assert RewardModelSnapshot.objects.latest().n_votes == 1


# --- active selection -----------------------------------------------------------------------


@pytest.mark.parametrize("widest", [0, 1, 2, 3])
def test_visitors_are_served_the_completion_the_model_is_least_sure_of_first(widest):
    run = make_run(votes_per_completion=3)
    EnvRun.objects.filter(pk=run.pk).update(reward_model=True)
    first, first_completions = submit(run, ["a1", "a2"])
    second, second_completions = submit(run, ["b1", "b2"])
    completions = first_completions + second_completions
    widths = [10.0, 20.0, 30.0, 40.0]
    widths[widest] = 500.0
    env_model_rewards_store(
        submission_id=first.pk, rewards=_rewards(first_completions, widths[:2]), snapshot_id=1
    )
    env_model_rewards_store(
        submission_id=second.pk, rewards=_rewards(second_completions, widths[2:]), snapshot_id=1
    )
    session = f"visitor-{uuid.uuid4().hex[:8]}"
    terms_accept(voter_id=session)
    battle = env_battle_serve(session_key=session)
    env = EnvBattle.objects.get(battle=battle)
    assert completions[widest].pk in {env.completion_a_id, env.completion_b_id}


def test_without_reward_model_the_model_interval_does_not_order_the_serving():
    # The same widths on a run that did not ask for model rewards: every completion is served
    # in the ordinary order, so over a few visitors the narrow group is served too.
    run = make_run(votes_per_completion=3)
    first, first_completions = submit(run, ["a1", "a2"])
    second, second_completions = submit(run, ["b1", "b2"])
    env_model_rewards_store(
        submission_id=first.pk, rewards=_rewards(first_completions, [900, 900]), snapshot_id=1
    )
    served = set()
    for n in range(2):  # each group's one pair, held by its visitor
        session = f"visitor-{n}-{uuid.uuid4().hex[:6]}"
        terms_accept(voter_id=session)
        battle = env_battle_serve(session_key=session)
        served.add(EnvBattle.objects.get(battle=battle).submission_id)
    assert second.pk in served
