"""The environment's models moved from the arena to this app without their rows moving: a
database at arena 0016 holding runs, submissions, completions with their rewards and battles is
migrated forward and read back, unchanged, through the environment app's models."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from arena.models import ApiToken, ArenaModel, Battle
from environment.models import EnvBattle, EnvCompletion, EnvRun, EnvSubmission

BEFORE = [("arena", "0016_env_battle_counted"), ("environment", None)]
MOVED = ["envrun", "envsubmission", "envcompletion", "envbattle"]


def _executor() -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    return executor


def _tables() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_move_keeps_runs_submissions_completions_rewards_and_battles():
    executor = _executor()
    executor.migrate(BEFORE)
    # The models as every migration applied now (arena 0016 and the rest's latest) define them.
    loader = _executor().loader
    old = loader.project_state(list(loader.applied_migrations), at_end=True).apps
    assert ("arena", "0017_env_models_to_environment") not in loader.applied_migrations
    assert ("environment", "0001_initial") not in loader.applied_migrations
    tables_before = _tables()
    assert {"arena_envrun", "arena_envrun_references", "arena_envbattle"} <= tables_before

    # The content types as a database of that time has them: the arena's.
    ContentType = old.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="environment").delete()
    old_types = {
        model: ContentType.objects.get_or_create(app_label="arena", model=model)[0].pk
        for model in MOVED
    }

    OldToken = old.get_model("arena", "ApiToken")
    OldModel = old.get_model("arena", "ArenaModel")
    OldPrompt = old.get_model("arena", "Prompt")
    OldBattle = old.get_model("arena", "Battle")
    OldRun = old.get_model("arena", "EnvRun")
    OldSubmission = old.get_model("arena", "EnvSubmission")
    OldCompletion = old.get_model("arena", "EnvCompletion")
    OldEnvBattle = old.get_model("arena", "EnvBattle")

    token = OldToken.objects.create(
        name="trainer", prefix="arena_abc", key_hash="a" * 64, scopes=["env"]
    )
    hidden = OldModel.objects.create(
        slug="env-run-1", display_name="Submitted answer", is_active=False, is_public=False
    )
    reference = OldModel.objects.create(slug="ref-model", display_name="Reference")
    run_id = uuid.uuid4()
    run = OldRun.objects.create(
        id=run_id,
        token=token,
        name="grpo",
        model=hidden,
        votes_per_completion=2,
        share=0.5,
        webhook_url="https://trainer.example/hook",
        webhook_secret="s" * 64,
        reward_seq=3,
        webhook_seq=1,
        webhook_status="delivered",
        reward_model=True,
    )
    run.references.add(reference)
    prompt = OldPrompt.objects.create(turns=["Say hi."], source="env")
    submission = OldSubmission.objects.create(
        run=run,
        idempotency_key="step-1",
        request_hash="b" * 64,
        prompt=prompt,
        messages=[{"role": "user", "content": "Say hi."}],
        expires_at=timezone.now() + timedelta(hours=72),
    )
    scored = OldCompletion.objects.create(
        run=run,
        submission=submission,
        index=0,
        text="Hi!",
        meta={"step": 1},
        votes=2,
        wins=1,
        ties=1,
        score=0.25,
        score_low=-0.5,
        score_high=1.0,
        status="complete",
        source="human",
        model_score=0.1,
        model_score_low=-0.2,
        model_score_high=0.4,
        model_snapshot_id=7,
        seq=3,
    )
    pending = OldCompletion.objects.create(
        run=run, submission=submission, index=1, text="Hello.", seq=2
    )
    battle = OldBattle.objects.create(
        source="env", model_a=hidden, model_b=hidden, prompt=prompt, state="voted"
    )
    OldEnvBattle.objects.create(
        battle=battle,
        run=run,
        submission=submission,
        completion_a=scored,
        completion_b=pending,
        counted=False,
    )

    executor = _executor()
    executor.migrate([("arena", "0017_env_models_to_environment"), ("environment", "0001_initial")])
    # The move dropped, renamed and added no table: the rows stayed where they were.
    assert _tables() == tables_before
    # Later migrations (tables of their own) apply on top, as on a real upgrade.
    _executor().migrate(_executor().loader.graph.leaf_nodes())
    moved = EnvRun.objects.get(pk=run_id)
    assert moved._meta.app_label == "environment"
    assert (moved.name, moved.token, moved.model) == (
        "grpo",
        ApiToken.objects.get(pk=token.pk),
        ArenaModel.objects.get(pk=hidden.pk),
    )
    assert list(moved.references.values_list("slug", flat=True)) == ["ref-model"]
    assert (moved.share, moved.reward_seq, moved.webhook_seq, moved.reward_model) == (
        0.5,
        3,
        1,
        True,
    )
    assert moved.webhook_status == EnvRun.WebhookStatus.DELIVERED
    assert ArenaModel.objects.get(pk=hidden.pk).env_run == moved

    [sub] = EnvSubmission.objects.filter(run=moved)
    assert (sub.idempotency_key, sub.prompt_id, sub.messages) == (
        "step-1",
        prompt.pk,
        [{"role": "user", "content": "Say hi."}],
    )
    records = list(EnvCompletion.objects.filter(run=moved).order_by("index"))
    assert [c.pk for c in records] == [scored.pk, pending.pk]
    first, second = records
    assert (first.score, first.score_low, first.score_high, first.source, first.status) == (
        0.25,
        -0.5,
        1.0,
        EnvCompletion.Source.HUMAN,
        EnvCompletion.Status.COMPLETE,
    )
    assert (first.model_score, first.model_snapshot_id, first.seq, first.meta) == (
        0.1,
        7,
        3,
        {"step": 1},
    )
    assert (second.status, second.score, second.seq) == (EnvCompletion.Status.PENDING, None, 2)

    env_battle = EnvBattle.objects.get(battle_id=battle.pk)
    assert (env_battle.completion_a, env_battle.completion_b, env_battle.counted) == (
        first,
        second,
        False,
    )
    assert Battle.objects.get(pk=battle.pk).env == env_battle

    # The content types moved with the models (same ids: permissions and log entries follow).
    from django.contrib.contenttypes.models import ContentType as CurrentContentType

    for model, pk in old_types.items():
        assert CurrentContentType.objects.get(pk=pk).app_label == "environment", model
    assert not CurrentContentType.objects.filter(app_label="arena", model__in=MOVED).exists()
