import numpy as np
import pytest

from arena.tests.factories import ArenaModelFactory
from config.queues import TASK_QUEUES
from config.schedule import BEAT_SCHEDULE
from redteam import tasks
from redteam.models import Attempt, PlayerProfile, RobustnessSnapshot
from redteam.tests.factories import AttemptFactory, ChallengeFactory

pytestmark = pytest.mark.django_db


def _attempts(n=240):
    rng = np.random.default_rng(2)
    models = [ArenaModelFactory(slug=s) for s in ("weak", "strong")]
    challenges = [ChallengeFactory(slug=s) for s in ("easy", "hard")]
    for i in range(n):
        m = int(rng.integers(0, 2))
        c = int(rng.integers(0, 2))
        p_success = [0.7, 0.3][m] * [1.0, 0.6][c]
        state = Attempt.State.SUCCEEDED if rng.random() < p_success else Attempt.State.SURRENDERED
        AttemptFactory(player_id=f"p{i % 6}", model=models[m], challenge=challenges[c], state=state)


def test_a_refit_writes_a_snapshot_with_the_stronger_model_more_robust():
    _attempts()
    PlayerProfile.objects.create(player_id="p1", pseudonym="Mallory", on_board=True)
    PlayerProfile.objects.create(player_id="p2", pseudonym="Hidden", on_board=False)
    tasks.refit()
    snapshot = RobustnessSnapshot.objects.get()
    rows = {r["name"]: r for r in snapshot.payload["models"]}
    assert rows["strong"]["robustness"] > rows["weak"]["robustness"]
    assert rows["strong"]["lower"] < rows["strong"]["robustness"] < rows["strong"]["upper"]
    pseudonyms = {r["player_id"]: r["pseudonym"] for r in snapshot.payload["players"]}
    assert pseudonyms["p1"] == "Mallory"
    assert pseudonyms["p2"] is None
    assert snapshot.n_attempts == 240


def test_a_rerun_without_new_ended_attempts_writes_no_snapshot():
    _attempts(60)
    tasks.refit()
    assert tasks.refit()["created"] is False
    assert RobustnessSnapshot.objects.count() == 1


def test_errored_open_and_flagged_attempts_stay_out_of_the_fit():
    _attempts(60)
    AttemptFactory(state=Attempt.State.ERRORED)
    AttemptFactory(state=Attempt.State.OPEN, ended_at=None)
    AttemptFactory(state=Attempt.State.SUCCEEDED, flagged=True)
    tasks.refit()
    assert RobustnessSnapshot.objects.get().n_attempts == 60


def test_an_attempt_that_ends_queues_a_refit_on_commit(
    django_capture_on_commit_callbacks, monkeypatch
):
    queued = []
    monkeypatch.setattr(tasks.refit, "apply_async", lambda *a, **k: queued.append(k))
    model, challenge = ArenaModelFactory(), ChallengeFactory()
    with django_capture_on_commit_callbacks(execute=True):
        AttemptFactory(model=model, challenge=challenge, state=Attempt.State.OPEN, ended_at=None)
    assert queued == []
    with django_capture_on_commit_callbacks(execute=True):
        AttemptFactory(model=model, challenge=challenge, state=Attempt.State.SUCCEEDED)
        assert queued == []  # not inside the open transaction
    assert len(queued) == 1


def test_the_refit_is_routed_to_the_ratings_queue_and_swept_by_beat():
    assert TASK_QUEUES["redteam.refit"] == "ratings"
    assert tasks.refit.soft_time_limit and tasks.refit.time_limit
    assert any(e["task"] == "redteam.refit" for e in BEAT_SCHEDULE.values())
