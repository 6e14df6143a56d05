"""Live battle services: drawing pairs, the circuit breaker, limits, named mode, registration."""

import random
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from arena.errors import ArenaError
from arena.live.sweep import live_battles_sweep
from arena.live.turns import (
    battle_regenerate,
    battle_start_live,
    battle_turn_add,
    battle_turn_finish,
    messages_progress,
)
from arena.live.upstream import Answer
from arena.models import ArenaModel, Battle, BattleMessage, LiveLimits, Provider
from arena.selectors import live_battles_enabled, votes_for_rating
from arena.services.models import model_register
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import ArenaModelFactory, ProviderFactory, pool_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("upstream_clients")]


def live(n: int, provider=None, **kwargs) -> list[ArenaModel]:
    provider = provider or ProviderFactory()
    return [
        ArenaModelFactory(provider=provider, upstream_model_id=f"up-{provider.pk}-{i}", **kwargs)
        for i in range(n)
    ]


def finish(plan, status="done", error_kind=""):
    answers = {}
    for side, side_plan in plan.sides.items():
        answers[side] = (
            side_plan.message_id,
            Answer(parts=["text"], status=status, error_kind=error_kind),
        )
    battle_turn_finish(battle_id=plan.battle_id, answers=answers)
    return Battle.objects.select_related("model_a", "model_b").get(pk=plan.battle_id)


def test_live_battle_draws_two_different_models_and_never_a_zero_weight_one():
    models = live(3)
    ArenaModel.objects.filter(pk=models[2].pk).update(sampling_weight=0)
    rng = random.Random(7)
    seen = set()
    for _ in range(30):
        plan = battle_start_live(session_key=f"s{len(seen)}-{_}", prompt="Hi", rng=rng)
        battle = Battle.objects.get(pk=plan.battle_id)
        assert battle.model_a_id != battle.model_b_id
        seen |= {battle.model_a_id, battle.model_b_id}
    assert seen == {models[0].pk, models[1].pk}


def test_models_of_a_provider_with_an_open_breaker_are_skipped_until_the_cooldown_ends(
    settings, monkeypatch
):
    settings.ARENA_LIVE_BREAKER_FAILURES = 2
    failing = live(2)
    healthy = live(2)
    plan = battle_start_live(session_key="s", prompt="Hi")
    # make both sides of some battles fail on the failing provider until its breaker opens
    for _ in range(2):
        plan = battle_start_live(
            session_key="s", prompt="Hi", mode="named", model_slugs=[m.slug for m in failing]
        )
        finish(plan, status="error", error_kind="connection")
    provider = failing[0].provider
    provider.refresh_from_db()
    assert provider.breaker_open_until is not None and provider.breaker_open_until > timezone.now()
    for i in range(10):
        plan = battle_start_live(session_key=f"x{i}", prompt="Hi")
        battle = Battle.objects.get(pk=plan.battle_id)
        assert {battle.model_a_id, battle.model_b_id} == {m.pk for m in healthy}
    # The cool-down ends with no write: the clock passes it (the kept breaker is compared with it).
    later = provider.breaker_open_until + timedelta(seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    drawn = set()
    for i in range(40):
        battle = Battle.objects.get(
            pk=battle_start_live(session_key=f"y{i}", prompt="Hi").battle_id
        )
        drawn |= {battle.model_a_id, battle.model_b_id}
    assert drawn >= {m.pk for m in failing}


def test_refused_requests_do_not_open_the_breaker(settings):
    settings.ARENA_LIVE_BREAKER_FAILURES = 2
    models = live(2)
    for _ in range(3):  # a visitor's too-long follow-ups, say
        plan = battle_start_live(
            session_key="s", prompt="Hi", mode="named", model_slugs=[m.slug for m in models]
        )
        assert finish(plan, status="error", error_kind="request").state == Battle.State.ERRORED
    provider = Provider.objects.get()
    assert provider.breaker_failures == 0 and provider.breaker_open_until is None


def test_a_successful_answer_closes_the_breaker():
    models = live(2)
    Provider.objects.update(breaker_failures=5, breaker_open_until=timezone.now())
    plan = battle_start_live(
        session_key="s", prompt="Hi", mode="named", model_slugs=[m.slug for m in models]
    )
    battle = finish(plan)
    assert battle.state == Battle.State.READY
    provider = Provider.objects.get()
    assert provider.breaker_failures == 0 and provider.breaker_open_until is None


def test_fewer_than_two_available_live_models_refuse_a_live_battle():
    live(1)
    with pytest.raises(ArenaError) as refused:
        battle_start_live(session_key="s", prompt="Hi")
    assert refused.value.code == "no_live_models" and refused.value.status == 503
    assert not live_battles_enabled()


def test_admin_limits_override_the_settings(settings):
    live(2)
    settings.ARENA_LIVE_MAX_PROMPT_CHARS = 1000
    LiveLimits.objects.create(pk=1, max_prompt_chars=5, max_output_tokens=7)
    with pytest.raises(ArenaError) as refused:
        battle_start_live(session_key="s", prompt="123456")
    assert refused.value.code == "prompt_too_long" and refused.value.field == "prompt"
    plan = battle_start_live(session_key="s", prompt="12345")
    assert plan.max_tokens == 7


def test_turns_per_battle_are_limited(settings):
    settings.ARENA_LIVE_MAX_TURNS = 2
    live(2)
    plan = battle_start_live(session_key="s", prompt="one")
    finish(plan)
    finish(battle_turn_add(battle_id=plan.battle_id, session_key="s", prompt="two"))
    with pytest.raises(ArenaError) as refused:
        battle_turn_add(battle_id=plan.battle_id, session_key="s", prompt="three")
    assert refused.value.code == "turn_limit"


def test_concurrent_battles_per_session_are_limited(settings):
    settings.ARENA_LIVE_MAX_CONCURRENT_BATTLES = 2
    live(2)
    first = battle_start_live(session_key="s", prompt="one")
    battle_start_live(session_key="s", prompt="two")
    with pytest.raises(ArenaError) as refused:
        battle_start_live(session_key="s", prompt="three")
    assert refused.value.code == "too_many_battles" and refused.value.status == 429
    battle_start_live(session_key="other", prompt="fine")  # other sessions are not affected
    finish(first)
    battle_start_live(session_key="s", prompt="three")


def test_a_failed_or_stopped_turn_cannot_be_continued_but_can_be_regenerated():
    live(2)
    plan = battle_start_live(session_key="s", prompt="one")
    battle = finish(plan, status="aborted")
    assert battle.state == Battle.State.ABORTED
    with pytest.raises(ArenaError) as refused:
        battle_turn_add(battle_id=plan.battle_id, session_key="s", prompt="two")
    assert refused.value.code == "not_continuable"
    again = battle_regenerate(battle_id=plan.battle_id, session_key="s")
    assert again.turn == 0 and again.regenerated
    assert finish(again).state == Battle.State.READY
    assert BattleMessage.objects.filter(battle_id=plan.battle_id).count() == 4
    assert (
        BattleMessage.objects.filter(
            battle_id=plan.battle_id, superseded_at__isnull=False, status="aborted"
        ).count()
        == 2
    )


def test_named_mode_votes_are_kept_but_left_out_of_the_leaderboard_by_default():
    models = live(2)
    plan = battle_start_live(
        session_key="s", prompt="Hi", mode="named", model_slugs=[models[1].slug, models[0].slug]
    )
    finish(plan)
    terms_accept(voter_id="v")
    vote_record(battle_id=plan.battle_id, session_key="s", voter_id="v", winner="model_a")
    battle = Battle.objects.get(pk=plan.battle_id)
    assert battle.mode == Battle.Mode.NAMED and battle.model_a_id == models[1].pk
    assert not votes_for_rating().filter(battle_id=plan.battle_id).exists()
    assert votes_for_rating(anonymous_only=False).filter(battle_id=plan.battle_id).exists()


def test_named_mode_refuses_the_same_model_twice_and_unknown_models():
    models = live(2)
    for slugs in ([models[0].slug, models[0].slug], [models[0].slug, "nope"], "x"):
        with pytest.raises(ArenaError) as refused:
            battle_start_live(session_key="s", prompt="Hi", mode="named", model_slugs=slugs)
        assert refused.value.field == "models"


def test_model_register_creates_provider_and_model_once():
    first = model_register(
        slug="local-llama", provider_url="http://127.0.0.1:8001/v1/", upstream_model="llama3"
    )
    again = model_register(
        slug="local-llama",
        provider_url="http://127.0.0.1:8001/v1",
        upstream_model="llama3",
        update=True,
    )
    assert first.created and not again.created and again.changes == ()
    assert first.model.pk == again.model.pk and Provider.objects.count() == 1
    assert again.model.is_live and again.model.provider.base_url == "http://127.0.0.1:8001/v1"


def test_add_model_command_registers_a_live_model_from_the_shell():
    call_command(
        "add_model",
        "--slug=gpt-x",
        "--provider-url=https://api.example.com/v1",
        "--upstream-model=gpt-x-2025",
        "--api-key-env=EXAMPLE_KEY",
        "--weight=2.5",
        verbosity=0,
    )
    model = ArenaModel.objects.select_related("provider").get(slug="gpt-x")
    assert model.upstream_model_id == "gpt-x-2025" and model.sampling_weight == 2.5
    assert model.provider.api_key_env == "EXAMPLE_KEY"
    with pytest.raises(CommandError, match="api_key_env"):
        call_command(
            "add_model",
            "--slug=bad",
            "--provider-url=https://other.example.com/v1",
            "--upstream-model=m",
            "--api-key-env=not a name",
        )


def test_battle_page_serves_live_battles_only_with_two_live_models(client):
    pool_of(n_models=2)
    page = client.get("/").content.decode()
    assert 'data-mode="pool"' in page and 'data-testid="prompt-input"' not in page
    live(2)
    page = client.get("/").content.decode()
    assert 'data-mode="live"' in page
    for hook in ("prompt-input", "send", "stop", "regenerate", "new-battle", "vote-a"):
        assert f'data-testid="{hook}"' in page


def test_the_sweep_settles_battles_a_stopped_server_left_streaming_and_keeps_their_text(settings):
    settings.ARENA_LIVE_ANSWER_SECONDS = 30
    models = live(2)
    slugs = [m.slug for m in models]
    stale = battle_start_live(session_key="s1", prompt="Hi", mode="named", model_slugs=slugs)
    fresh = battle_start_live(session_key="s2", prompt="Hi", mode="named", model_slugs=slugs)
    messages_progress(contents={stale.sides["a"].message_id: "half an ans"})
    Battle.objects.filter(pk=stale.battle_id).update(
        updated_at=timezone.now() - timedelta(seconds=91)
    )
    assert live_battles_sweep() == 1
    assert live_battles_sweep() == 0  # a rerun finds nothing more
    assert Battle.objects.get(pk=stale.battle_id).state == Battle.State.ABORTED
    assert Battle.objects.get(pk=fresh.battle_id).state == Battle.State.STREAMING
    a = BattleMessage.objects.get(pk=stale.sides["a"].message_id)
    assert a.status == BattleMessage.Status.ABORTED and a.content == "half an ans"
    # an aborted battle may be regenerated: the visitor is not stuck
    assert battle_regenerate(battle_id=stale.battle_id, session_key="s1").turn == 0


def test_the_live_sweep_runs_from_the_beat_schedule(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["arena-live-battles-sweep"]
    assert entry["task"] == "arena.tasks.live_battles_sweep"
    from config.celery_app import app

    app.loader.import_default_modules()  # what a worker does at start: autodiscovery
    assert "arena.tasks.live_battles_sweep" in app.tasks


def test_live_calls_are_rate_limited_per_address_whatever_the_session(settings, frozen_clock):
    settings.RATELIMIT_ENABLE = True
    settings.ARENA_RATELIMIT_LIVE = "2/m"
    live(2)
    for i in range(2):
        battle_start_live(session_key=f"fresh-{i}", prompt="Hi", client_ip="203.0.113.7")
    with pytest.raises(ArenaError) as refused:
        battle_start_live(session_key="fresh-3", prompt="Hi", client_ip="203.0.113.7")
    assert refused.value.status == 429 and refused.value.code == "rate_limited"
    battle_start_live(session_key="fresh-4", prompt="Hi", client_ip="198.51.100.1")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_simultaneous_starts_of_one_session_cannot_pass_the_concurrency_limit():
    import threading

    from django.db import connection

    LiveLimits.objects.create(max_concurrent_battles=1)
    live(2)
    barrier = threading.Barrier(4)
    outcomes = []

    def start():
        try:
            barrier.wait()
            battle_start_live(session_key="same", prompt="Hi")
            outcomes.append("ok")
        except ArenaError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] + ["too_many_battles"] * 3


def test_finishing_a_turn_again_changes_nothing():
    """A save retried after its reply was lost, or after the sweep or a regenerate, is a no-op."""
    live(2)
    plan = battle_start_live(session_key="s", prompt="Hi")
    first = finish(plan)
    assert first.state == Battle.State.READY
    again = finish(plan, status="error", error_kind="upstream")
    assert again.state == Battle.State.READY
    assert set(BattleMessage.objects.values_list("status", flat=True)) == {"done"}
    regenerated = battle_regenerate(battle_id=plan.battle_id, session_key="s")
    assert finish(plan, status="aborted").state == Battle.State.STREAMING
    assert finish(regenerated).state == Battle.State.READY
