"""Writing leaderboard snapshots: categories, the no-op rule, immutability, the advisory lock."""

import threading
import time
from unittest import mock

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import DatabaseError, connection, connections, transaction

from arena.selectors import votes_for_rating
from arena.tests.test_settings import import_production_settings
from ratings import engine, selectors, services
from ratings.models import LeaderboardSnapshot, SnapshotImmutableError


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_LONG_PROMPT_CHARS = 200


def category(snapshot, key):
    return next(c for c in snapshot.payload["categories"] if c["key"] == key)


def test_refresh_writes_every_category_with_and_without_style_control(rated_models):
    # The services module's clock (only its own: psycopg and Django keep the real one) reads
    # 100.0 when the run starts and 102.5 when it ends.
    clock = mock.Mock(monotonic=mock.Mock(side_effect=[100.0, 102.5]))
    with mock.patch.object(services, "time", clock):
        result = services.snapshot_refresh()

    snapshot = result.snapshot
    assert result.created
    assert snapshot.n_votes == 60
    assert snapshot.vote_high_water == max(v["id"] for v in votes_for_rating())
    assert snapshot.params["ci"] == "sandwich"
    assert snapshot.duration_seconds == 2.5
    overall = category(snapshot, "overall")
    assert overall["status"] == "ok" and overall["n_votes"] == 60
    on, off = overall["results"]["on"], overall["results"]["off"]
    assert [m["model"] for m in on["models"]][0] == "alpha"
    assert [m["model"] for m in off["models"]] == ["alpha", "beta", "gamma"]
    assert set(on["style_coefficients"]) == {"length", "header", "list", "bold"}
    assert off["style_coefficients"] is None
    assert {c["key"] for c in snapshot.payload["categories"]} == {
        "overall",
        "coding",
        "code-ran",
        "long_prompts",
        "multi_turn",
        "vision",
        "lang-en",
    }
    assert category(snapshot, "lang-en")["label"] == "English"
    assert snapshot.payload["models"]["alpha"] == {
        "name": "Alpha Large",
        "organization": "Org A",
        "license": "Apache-2.0",
        "active": True,
    }


def test_refresh_on_an_unchanged_high_water_mark_is_a_no_op(rated_models):
    first = services.snapshot_refresh()
    with mock.patch.object(engine, "rate", side_effect=AssertionError("fitted again")) as rate:
        second = services.snapshot_refresh()

    assert not second.created
    assert second.snapshot.pk == first.snapshot.pk
    assert rate.call_count == 0
    assert LeaderboardSnapshot.objects.count() == 1


def test_a_new_vote_writes_a_new_snapshot_and_leaves_the_old_one_unchanged(rated_models, make_vote):
    first = services.snapshot_refresh().snapshot
    before = LeaderboardSnapshot.objects.values().get(pk=first.pk)
    make_vote(rated_models[2], rated_models[0], "model_a")

    second = services.snapshot_refresh()

    assert second.created and second.snapshot.pk != first.pk
    assert second.snapshot.n_votes == 61
    assert second.snapshot.vote_high_water > first.vote_high_water
    assert LeaderboardSnapshot.objects.values().get(pk=first.pk) == before


def test_a_vote_flagged_since_the_last_run_triggers_a_new_snapshot(rated_models):
    from arena.models import Vote

    first = services.snapshot_refresh().snapshot
    Vote.objects.filter(pk=Vote.objects.order_by("id").values("id")[:1]).update(flagged=True)

    second = services.snapshot_refresh()

    assert second.created
    assert second.snapshot.vote_high_water == first.vote_high_water
    assert second.snapshot.n_votes == 59


def test_force_writes_a_new_snapshot_on_unchanged_votes(rated_models):
    first = services.snapshot_refresh().snapshot
    second = services.snapshot_refresh(force=True)
    assert second.created and second.snapshot.pk != first.pk


@pytest.mark.parametrize(
    "setting, value",
    [
        ("RATINGS_POSITION", True),
        ("RATINGS_INVERSE_PROPENSITY", True),
    ],
)
def test_turning_on_the_position_or_the_propensity_weights_writes_a_new_snapshot(
    rated_models, settings, setting, value
):
    first = services.snapshot_refresh().snapshot
    setattr(settings, setting, value)
    second = services.snapshot_refresh()
    assert second.created and second.snapshot.pk != first.pk
    result = category(second.snapshot, "overall")["results"]["on"]
    assert result["method"]["position"] is settings.RATINGS_POSITION
    assert result["method"]["inverse_propensity"] is settings.RATINGS_INVERSE_PROPENSITY
    assert (result["position"] is not None) is settings.RATINGS_POSITION
    assert (category(first, "overall")["results"]["on"]["position"]) is None


def test_a_changed_propensity_floor_writes_a_new_snapshot_only_with_the_weights_on(
    rated_models, settings
):
    first = services.snapshot_refresh().snapshot
    settings.RATINGS_PROPENSITY_MIN_SHARE = 0.5
    assert not services.snapshot_refresh().created
    settings.RATINGS_INVERSE_PROPENSITY = True
    second = services.snapshot_refresh().snapshot
    settings.RATINGS_PROPENSITY_MIN_SHARE = 0.2
    third = services.snapshot_refresh()
    assert second.pk != first.pk and third.created


def test_the_propensity_weights_count_a_pair_the_sampler_favours_less(rated_models, settings):
    from arena.models import ArenaModel

    alpha, beta, gamma = rated_models
    settings.ARENA_ACTIVE_SAMPLING = False
    plain = services.snapshot_refresh().snapshot
    # alpha and beta drawn far more often than any pair with gamma: each of their votes counts less.
    ArenaModel.objects.filter(pk__in=[alpha.pk, beta.pk]).update(sampling_weight=20)
    settings.RATINGS_INVERSE_PROPENSITY = True
    weighted = services.snapshot_refresh().snapshot
    propensity = selectors.draw_propensity(settings.RATINGS_PROPENSITY_MIN_SHARE)
    assert propensity[("alpha", "beta")] > 10 * propensity[("alpha", "gamma")]
    before = category(plain, "overall")["results"]["off"]["models"]
    after = category(weighted, "overall")["results"]["off"]["models"]
    assert [m["rating"] for m in before] != [m["rating"] for m in after]


@pytest.mark.parametrize("value", ["0", "1.5", "-1"])
def test_an_out_of_range_propensity_floor_refuses_to_start_naming_the_setting(value):
    result = import_production_settings(
        "import config.settings.test", RATINGS_PROPENSITY_MIN_SHARE=value
    )
    assert result.returncode != 0
    assert ImproperlyConfigured.__name__ in result.stderr
    assert "RATINGS_PROPENSITY_MIN_SHARE must be from 0.001 to 1" in result.stderr


def test_an_in_range_propensity_floor_starts():
    result = import_production_settings(
        "import config.settings.test", RATINGS_PROPENSITY_MIN_SHARE="0.5"
    )
    assert result.returncode == 0, result.stderr


def test_saving_an_existing_snapshot_is_refused(rated_models):
    snapshot = services.snapshot_refresh().snapshot
    snapshot.n_votes = 1
    with pytest.raises(SnapshotImmutableError):
        snapshot.save()


def test_the_database_refuses_to_update_a_snapshot_row(rated_models):
    snapshot = services.snapshot_refresh().snapshot
    with pytest.raises(DatabaseError), transaction.atomic():
        LeaderboardSnapshot.objects.filter(pk=snapshot.pk).update(n_votes=1)
    assert LeaderboardSnapshot.objects.get(pk=snapshot.pk).n_votes == 60


def test_named_and_flagged_votes_are_not_rated(rated_models, make_vote):
    alpha, beta, _ = rated_models
    make_vote(beta, alpha, "model_a", mode="named")
    make_vote(beta, alpha, "model_a", flagged=True)

    snapshot = services.snapshot_refresh().snapshot

    assert snapshot.n_votes == 60
    assert category(snapshot, "overall")["n_votes"] == 60


def test_a_category_with_too_few_votes_is_marked_and_the_rest_is_still_written(
    rated_models, settings
):
    snapshot = services.snapshot_refresh().snapshot

    coding = category(snapshot, "coding")
    assert coding["status"] == "insufficient"
    assert coding["results"] == {"on": None, "off": None}
    assert coding["reason"] == {
        "code": "too_few_votes",
        "votes": coding["n_votes"],
        "needed": settings.RATINGS_MIN_CATEGORY_VOTES,
    }
    assert category(snapshot, "overall")["status"] == "ok"


def test_no_votes_at_all_gives_a_snapshot_whose_categories_all_lack_votes(db):
    snapshot = services.snapshot_refresh().snapshot
    assert snapshot.n_votes == 0 and snapshot.vote_high_water == 0
    statuses = {c["key"]: c["status"] for c in snapshot.payload["categories"]}
    assert statuses == dict.fromkeys(
        ["overall", "coding", "code-ran", "long_prompts", "multi_turn", "vision"], "insufficient"
    )


def test_categories_select_coding_long_multi_turn_and_language_battles(db, make_vote):
    from arena.tests.factories import ArenaModelFactory

    a, b = ArenaModelFactory(), ArenaModelFactory()
    answers = [("# H\n\n- x\n**b**", "plain"), ("plain words " * 9, "- y"), ("a", "**b** c d")]

    def votes(**kwargs):
        for i in range(12):
            winner = ["model_a", "model_b", "tie", "model_a"][i % 4]
            make_vote(a, b, winner, answers=answers[i % 3], **kwargs)

    votes(category="coding")
    votes(prompt="Fix this:\n```py\nprint(1)\n```", code_ran=True)
    votes(prompt="x" * 250)
    votes(turns=2)
    votes(language="fr-FR")
    votes(images=1)

    snapshot = services.snapshot_refresh().snapshot

    counts = {c["key"]: c["n_votes"] for c in snapshot.payload["categories"]}
    assert counts == {
        "overall": 72,
        "coding": 24,
        "code-ran": 12,
        "long_prompts": 12,
        "multi_turn": 12,
        "vision": 12,
        "lang-en": 60,
        "lang-fr": 12,
    }
    assert category(snapshot, "lang-fr")["label"] == "French"
    assert all(c["status"] == "ok" for c in snapshot.payload["categories"])


def test_votes_for_rating_carries_turns_prompt_length_code_and_code_ran(db, make_vote):
    from arena.tests.factories import ArenaModelFactory

    a, b = ArenaModelFactory(), ArenaModelFactory()
    make_vote(a, b, prompt="abc", turns=2)
    make_vote(a, b, prompt="see ```x```", images=2, code_ran=True)

    rows = list(votes_for_rating())
    assert [r["prompt_has_image"] for r in rows] == [False, True]

    assert [r["turns"] for r in rows] == [2, 1]
    assert rows[0]["prompt_chars"] == len("abc") + len("Follow-up 1")
    assert [r["prompt_has_code"] for r in rows] == [False, True]
    assert [r["code_ran"] for r in rows] == [False, True]


def test_hidden_models_are_left_out_but_deactivated_models_stay(rated_models):
    alpha, beta, gamma = rated_models
    everyone = services.snapshot_refresh().snapshot
    ranks_with_alpha = {
        m["model"]: m["rank"] for m in category(everyone, "overall")["results"]["off"]["models"]
    }
    alpha.is_public = False
    alpha.save()
    gamma.is_active = False
    gamma.save()

    snapshot = services.snapshot_refresh(force=True).snapshot

    result = category(snapshot, "overall")["results"]["off"]
    assert [m["model"] for m in result["models"]] == ["beta", "gamma"]
    assert ranks_with_alpha["beta"] == 2  # alpha is ahead with confidence...
    assert result["models"][0]["rank"] == 1  # ...and ranks are recomputed without it
    assert result["matrices"]["models"] == ["beta", "gamma"]
    assert len(result["matrices"]["win_fraction"]) == 2
    assert snapshot.payload["models"]["gamma"]["active"] is False
    assert "alpha" not in snapshot.payload["models"]


def test_rate_snapshot_command_writes_once_then_reports_nothing_to_do(rated_models, capsys):
    call_command("rate_snapshot")
    call_command("rate_snapshot")
    out = capsys.readouterr().out
    assert "60 votes" in out and "nothing to do" in out
    assert LeaderboardSnapshot.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_advisory_lock_serialises_two_concurrent_runs(rated_models):
    """The second run waits on the lock while the first fits, then finds nothing to do."""
    entered, release = threading.Event(), threading.Event()
    real_rate = engine.rate
    calls = []

    def slow_rate(*args, **kwargs):
        calls.append(threading.current_thread().name)
        entered.set()
        release.wait(30)
        return real_rate(*args, **kwargs)

    results = {}

    def run(name):
        try:
            results[name] = services.snapshot_refresh()
        finally:
            connections.close_all()

    with mock.patch.object(engine, "rate", side_effect=slow_rate):
        first = threading.Thread(target=run, args=("first",), name="first")
        first.start()
        assert entered.wait(30), "the first run never reached the fit"
        second = threading.Thread(target=run, args=("second",), name="second")
        second.start()
        deadline = time.monotonic() + 30
        waiting = 0
        while time.monotonic() < deadline and not waiting:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                )
                waiting = cursor.fetchone()[0]
            time.sleep(0.05)
        assert waiting == 1, "the second run is not waiting on the advisory lock"
        assert set(calls) == {"first"}
        release.set()
        first.join(60)
        second.join(60)

    assert results["first"].created and not results["second"].created
    assert results["second"].snapshot.pk == results["first"].snapshot.pk
    assert set(calls) == {"first"}
    assert LeaderboardSnapshot.objects.count() == 1


def test_hiding_a_model_recomputes_the_others_rank_spreads_and_tiers(rated_models, settings):
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10  # the fixture's models have about 40 votes each
    alpha = rated_models[0]
    everyone = category(services.snapshot_refresh().snapshot, "overall")["results"]["off"]
    before = {m["model"]: m for m in everyone["models"]}
    assert before["alpha"]["tier"] == 1 and before["beta"]["tier"] == 2  # alpha is ahead
    assert before["alpha"]["rank_worst"] == 1
    alpha.is_public = False
    alpha.save()

    result = category(services.snapshot_refresh(force=True).snapshot, "overall")["results"]["off"]

    rows = {m["model"]: m for m in result["models"]}
    assert rows["beta"]["tier"] == 1
    assert rows["beta"]["rank"] == 1 and rows["beta"]["rank_worst"] <= 2
    assert rows["gamma"]["rank_worst"] <= 2
