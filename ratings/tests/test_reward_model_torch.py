"""The reward model with its extra installed (torch, sentence-transformers, the bundled
all-MiniLM-L6-v2): the real embedder loads offline, and the whole path runs: a refit writes a
snapshot, and a run created with reward_model gets model records with intervals at once.

Run in the extra's virtualenv (``make test-reward-model``, ``.venv311``); elsewhere these tests skip with the reason, or
fail with ARENA_REQUIRE_REWARD_MODEL=1."""

import json
import os
import uuid

import numpy as np
import pytest
from django.test import Client

from arena.models import Vote
from arena.tokens import token_create
from environment.models import EnvCompletion
from environment.tests.env_helpers import eager_tasks, judge, make_run, side_text, submit, winner_by
from ratings import tasks
from ratings.models import RewardModelSnapshot
from ratings.reward_model import embedding
from ratings.reward_model.services import reward_model_unavailable, snapshot_head

__all__ = ["eager_tasks"]  # a fixture, used by name

pytestmark = [pytest.mark.reward_model, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_the_bundled_embedder_loads_offline_and_embeds_by_meaning():
    assert embedding.unavailable_reason() is None
    vectors = embedding.embed(
        [
            "How do I bake bread at home?",
            "A recipe for making a loaf of bread in your kitchen.",
            "The stock market fell sharply on Tuesday.",
        ]
    )
    assert vectors.shape == (3, embedding.EMBEDDING_DIM)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_the_reward_model_is_available_once_the_setting_is_on(settings):
    settings.ARENA_REWARD_MODEL = False
    assert "ARENA_REWARD_MODEL" in reward_model_unavailable()
    settings.ARENA_REWARD_MODEL = True
    assert reward_model_unavailable() is None


QUALITY = {
    "Rain is water that falls from clouds when droplets grow heavy.": 3,
    "Rain happens.": 2,
    "I like turtles.": 1,
}


def by_quality(env, side):
    return QUALITY.get(side_text(env, side), 0)


def test_a_refit_then_a_model_run_gets_model_records_with_intervals(
    settings, eager_tasks, django_capture_on_commit_callbacks
):
    settings.ARENA_REWARD_MODEL = True
    settings.RATINGS_EAGER_REFRESH_IN_BACKGROUND = False
    voted = make_run(votes_per_completion=3)
    submit(voted, list(QUALITY), prompt="Why does it rain?")
    judge(6, winner_by(by_quality))
    snapshot_id = tasks.reward_model_refit.apply().get()
    snapshot = RewardModelSnapshot.objects.get(pk=snapshot_id)
    assert snapshot.n_votes == Vote.objects.count() >= 3
    assert snapshot.spec["embedding"] == embedding.MODEL_NAME
    head, spec = snapshot_head(snapshot)
    assert head.weights_.shape == (spec.dim,) == (embedding.EMBEDDING_DIM + 1 + 4,)
    assert np.abs(head.weights_).max() > 0  # the votes moved it off the prior

    _, raw = token_create(name=f"trainer-{uuid.uuid4().hex[:6]}", scopes=["env"])
    client = Client()
    headers = {"Authorization": f"Bearer {raw}"}
    response = client.post(
        "/api/env/v1/runs",
        json.dumps({"name": "instant", "reward_model": True}),
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/api/env/v1/runs/{run_id}/submissions",
            json.dumps(
                {
                    "idempotency_key": "k",
                    "prompt": "Why does the sky look blue?",
                    "completions": [
                        {"text": "Sunlight scatters off air molecules; blue scatters most."},
                        {"text": "Because."},
                        {"text": "Bananas are yellow."},
                    ],
                }
            ),
            content_type="application/json",
            headers=headers,
        )
    assert response.status_code == 201, response.content
    feed = client.get(f"/api/env/v1/runs/{run_id}/rewards", {"limit": 100}, headers=headers)
    latest = {r["completion_id"]: r for r in feed.json()["records"]}
    assert len(latest) == 3
    for record in latest.values():
        assert record["source"] == "model"
        assert record["score_low"] < record["score"] < record["score_high"]
    assert sum(r["score"] for r in latest.values()) == pytest.approx(0.0, abs=1e-3)
    assert set(
        EnvCompletion.objects.filter(run_id=run_id).values_list("model_snapshot_id", flat=True)
    ) == {snapshot.pk}
