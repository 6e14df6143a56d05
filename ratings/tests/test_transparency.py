"""The public /transparency page, the link to it on every page, and the leaderboard's count of
the votes it leaves out, by reason."""

import re
from datetime import UTC, datetime

import pytest
from django.utils.html import escape

from arena.models import Battle, Vote
from arena.tests.factories import ArenaModelFactory, CompletionFactory, pool_of
from arena.transparency import pool_recognisability_refresh
from environment.tests.env_helpers import eager_tasks, make_run
from ratings import services
from ratings.flag_reasons import FLAG_REASON_LABEL, FLAG_REASON_TEXT
from ratings.transparency import crontab_text

__all__ = ["eager_tasks"]  # a fixture, used by name


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10


def _at(vote: Vote, when: datetime) -> None:
    Battle.objects.filter(pk=vote.battle_id).update(created_at=when)


@pytest.fixture
def arena_history(make_vote, rated_models):
    """The rated models, a deactivated one, a private variant, flagged and named votes, and an
    environment run whose hidden model was in a battle."""
    alpha, beta, gamma = rated_models
    retired = ArenaModelFactory(slug="retired-one", display_name="Retired One", is_active=False)
    private = ArenaModelFactory(slug="secret-variant", display_name="Secret", is_public=False)
    _at(make_vote(retired, alpha, "model_b"), datetime(2026, 3, 1, 12, tzinfo=UTC))
    _at(make_vote(retired, beta, "model_a"), datetime(2026, 4, 2, 12, tzinfo=UTC))
    _at(make_vote(private, gamma, "model_a"), datetime(2026, 5, 3, 12, tzinfo=UTC))
    make_vote(alpha, beta, "model_a", flagged=True)  # flags ["too_fast"]
    both = make_vote(alpha, gamma, "model_b", flagged=True)
    Vote.objects.filter(pk=both.pk).update(flags=["bot_user_agent", "too_fast"])
    leak = make_vote(beta, gamma, "tie", flagged=True)
    Vote.objects.filter(pk=leak.pk).update(flags=["identity_leak"])
    make_vote(alpha, gamma, "model_a", mode="named")
    make_vote(beta, gamma, "model_a", mode="named", flagged=True)  # named: not in by_reason
    CompletionFactory(model=alpha)  # a pool answer: alpha can be a reference
    run = make_run(references=[alpha])
    env_battle = make_vote(run.model, alpha, "model_a")
    Battle.objects.filter(pk=env_battle.battle_id).update(source=Battle.Source.ENV)
    Vote.objects.filter(pk=env_battle.pk).update(flagged=True, flags=["env_only_reason"])
    return {"retired": retired, "private": private, "run": run}


def test_the_page_lists_every_model_served_with_dates_and_flag_counts(client, arena_history):
    services.snapshot_refresh()
    response = client.get("/transparency")
    html = response.content.decode()
    assert response.status_code == 200
    # A deactivated model and a private variant, with their first and last battle dates.
    assert 'data-model="retired-one"' in html and 'data-model="secret-variant"' in html
    retired_row = html.split('data-model="retired-one"', 1)[1].split("</tr>", 1)[0]
    assert "deactivated" in retired_row
    assert ">2026-03-01</time>" in retired_row and ">2026-04-02</time>" in retired_row
    private_row = html.split('data-model="secret-variant"', 1)[1].split("</tr>", 1)[0]
    assert "private variant" in private_row and ">2026-05-03</time>" in private_row
    # Flagged votes by reason, environment battles aside (their reason never shows).
    flagged = html.split('data-testid="flagged-votes"', 1)[1].split("</section>", 1)[0]
    for code, n in (
        ("too_fast", "3 votes"),
        ("bot_user_agent", "1 vote"),
        ("identity_leak", "1 vote"),
    ):
        item = flagged.split(f'<li data-reason="{code}"', 1)[1].split("</li>", 1)[0]
        assert f'<span class="flag-count">{n}</span>: {escape(FLAG_REASON_TEXT[code])}' in item
        assert f"<code>{code}</code>" not in item
    assert "env_only_reason" not in html
    # The environment run's hidden model is one aggregated line, never listed by slug.
    run_slug = arena_history["run"].model.slug
    assert run_slug not in html
    line = " ".join(html.split('data-testid="trainer-submissions"', 1)[1].split("</p>")[0].split())
    assert "1 hidden model of environment runs, 1 battle and 1 vote" in line
    # The policy and the schedule.
    assert "Active sampling is on" in html
    assert "<code>*/10 * * * *</code>" in html


def test_the_page_says_when_active_sampling_is_off(client, db, settings):
    settings.ARENA_ACTIVE_SAMPLING = False
    html = client.get("/transparency").content.decode()
    assert "Active sampling is off" in html
    assert "No battle has been served yet." in html
    assert "No snapshot has been computed yet." in " ".join(html.split())


def test_the_page_shares_each_models_battles_and_the_draw_shares(client, arena_history):
    html = client.get("/transparency").content.decode()
    # retired-one: 2 of the arena's own battles (env battle aside).
    total = Battle.objects.exclude(source=Battle.Source.ENV).count()
    retired_row = html.split('data-model="retired-one"', 1)[1].split("</tr>", 1)[0]
    assert f"{round(200 / total)}%" in retired_row
    draws = html.split('data-testid="draw-shares"', 1)[1].split("</table>", 1)[0]
    # Active, positive-weight models can be drawn (the private variant too), retired ones not.
    assert "alpha" in draws and "secret-variant" in draws and "retired-one" not in draws


def test_the_page_counts_mixed_battles_apart_from_pool_and_live_ones(client, arena_history):
    mixed = Vote.objects.filter(battle__source=Battle.Source.POOL).first().battle
    Battle.objects.filter(pk=mixed.pk).update(source=Battle.Source.MIXED, live_side="a")
    pool = Battle.objects.filter(source=Battle.Source.POOL).count()
    html = client.get("/transparency").content.decode()
    kinds = " ".join(html.split('data-testid="battles-by-source"', 1)[1].split("</p>")[0].split())
    assert (
        '<span data-source="mixed">mixed (pool prompt, one live answer): 1 battle, 1 vote' in kinds
    )
    assert f'<span data-source="pool">pool: {pool} battles, {pool - 0} votes' in kinds
    assert 'data-source="env"' not in kinds  # environment battles are counted on their own


def test_the_page_names_the_live_models_mixed_battles_bridge_and_their_share(client, db, settings):
    from arena.tests.factories import ProviderFactory

    settings.ARENA_BRIDGE_SHARE = 0.25
    provider = ProviderFactory()
    ArenaModelFactory(
        slug="fresh-live", display_name="Fresh Live", provider=provider, upstream_model_id="up"
    )
    ArenaModelFactory(slug="pool-only", display_name="Pool Only")
    html = client.get("/transparency").content.decode()
    bridging = " ".join(html.split('data-testid="bridging"', 1)[1].split("</p>")[0].split())
    assert "25% of the pool battles" in bridging
    assert '<span data-bridged="fresh-live">Fresh Live</span>' in bridging
    assert "pool-only" not in bridging

    settings.ARENA_BRIDGE_SHARE = 0.0
    html = client.get("/transparency").content.decode()
    assert "Mixed battles are off" in html and 'data-bridged="fresh-live"' not in html


def test_the_page_runs_a_fixed_number_of_queries(
    client, arena_history, django_assert_max_num_queries
):
    for i in range(5):
        ArenaModelFactory(slug=f"extra-{i}")
    # The pool's recognisability figures are a task's, run inline where tasks are eager.
    pool_recognisability_refresh()
    # Before the first snapshot the page counts: the ledger's three queries and its history.
    with django_assert_max_num_queries(16):
        assert client.get("/transparency").status_code == 200


def test_trailing_slash_redirects_to_the_page(client, db):
    response = client.get("/transparency/?x=1")
    assert response.status_code == 301 and response["Location"] == "/transparency?x=1"


@pytest.mark.parametrize("path", ["/", "/leaderboard", "/about", "/transparency"])
def test_every_page_links_to_the_transparency_page(client, db, path):
    response = client.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    footer = html.split('<footer class="site-footer">', 1)[1]
    assert '<a href="/transparency" data-testid="transparency-link">' in footer


def test_the_leaderboard_footer_links_to_the_transparency_page(client, rated_models):
    services.snapshot_refresh()
    html = client.get("/leaderboard").content.decode()
    footer = html.split('data-testid="leaderboard-footer"', 1)[1].split("</p>", 1)[0]
    assert '<a href="/transparency">Transparency</a>' in footer


def test_the_leaderboard_shows_the_votes_it_left_out_by_reason(client, arena_history):
    snapshot = services.snapshot_refresh().snapshot
    assert snapshot.payload["excluded"] == {
        "named": 2,
        "flagged": 3,
        "by_reason": {"too_fast": 2, "bot_user_agent": 1, "identity_leak": 1},
        "duplicate_prompts": {"votes": 0, "prompts": 0, "cap": 25},
        "source_cap": {"votes": 0, "sources": 0, "min_votes": 20, "share": 0.15},
    }
    html = client.get("/leaderboard").content.decode()
    shown = " ".join(
        html.split('data-testid="excluded-votes"', 1)[1].split("(<a href", 1)[0].split()
    )
    assert "left out: 2 named" in shown
    for code, n in (("too_fast", 2), ("bot_user_agent", 1), ("identity_leak", 1)):
        assert (
            f'{n} flagged (<span class="flag-reason" data-reason="{code}" '
            f'title="{escape(FLAG_REASON_TEXT[code])}">{escape(FLAG_REASON_LABEL[code])}</span>)'
        ) in shown
    assert "env_only_reason" not in html
    body = client.get("/leaderboard.json").json()
    assert body["snapshot"]["excluded"] == snapshot.payload["excluded"]


def test_a_changed_flag_writes_a_new_snapshot(arena_history):
    first = services.snapshot_refresh()
    assert services.snapshot_refresh().created is False
    # A flagged vote's reason changes (the count of counted votes does not).
    vote = Vote.objects.filter(flags=["identity_leak"]).get()
    Vote.objects.filter(pk=vote.pk).update(flags=["identity_leak", "anomalous_voter"])
    second = services.snapshot_refresh()
    assert second.created and second.snapshot.pk != first.snapshot.pk
    assert second.snapshot.payload["excluded"]["by_reason"]["anomalous_voter"] == 1


def test_crontab_text_reads_the_five_fields():
    from celery.schedules import crontab

    assert crontab_text(crontab(minute="*/10")) == "*/10 * * * *"
    assert crontab_text(crontab(minute=0, hour=3, day_of_week="mon")) == "0 3 * * mon"


def _recognisable_row(html: str, slug: str) -> list[str]:
    row = html.split(f'data-recognisable="{slug}"', 1)[1].split("</tr>", 1)[0]
    # Each cell carries its column's name (data-label) for the phone layout.
    return [cell.split("</td>")[0] for cell in re.split(r'<td class="num"[^>]*>', row)[1:]]


def test_the_page_shows_how_recognisable_each_models_pool_answers_are(client, db, eager_tasks):
    models, prompts = pool_of(n_models=2, n_prompts=2)
    # A second variant of the first model's answer to the first prompt: an attacker who knows
    # the first recognises half of that prompt's appearances, all of the other's.
    CompletionFactory(prompt=prompts[0], model=models[0], turns=["Another answer", "More"])
    html = client.get("/transparency").content.decode()
    # prompts, answers, recognised by text, by style, names itself
    assert _recognisable_row(html, models[0].slug)[:3] == ["2", "3", "75%"]
    assert _recognisable_row(html, models[1].slug)[:3] == ["2", "2", "100%"]
    assert _recognisable_row(html, models[1].slug)[4] == "0%"


def test_the_figures_are_computed_by_a_task_once_per_pool_and_then_read(client, db, monkeypatch):
    from celery import current_app

    from arena.transparency import RECOGNISABILITY_TASK

    # The task is queued, not run, whatever the settings chose (eager without a broker): the
    # test runs it itself below, as a worker would.
    monkeypatch.setattr(current_app.tasks[RECOGNISABILITY_TASK], "apply_async", lambda: None)
    models, prompts = pool_of(n_models=2, n_prompts=2)
    html = client.get("/transparency").content.decode()
    assert "being computed" in html and "data-recognisable" not in html
    pool_recognisability_refresh()
    html = client.get("/transparency").content.decode()
    assert _recognisable_row(html, models[0].slug)[:3] == ["2", "2", "100%"]
    # A change of the pool is a new generation: its figures are computed anew.
    CompletionFactory(prompt=prompts[0], model=models[0], turns=["Another answer", "More"])
    assert "being computed" in client.get("/transparency").content.decode()
    pool_recognisability_refresh()
    html = client.get("/transparency").content.decode()
    assert _recognisable_row(html, models[0].slug)[:3] == ["2", "3", "75%"]


def test_the_page_shows_the_left_sides_coefficient_when_the_fit_has_a_position_term(
    client, rated_models, settings
):
    settings.RATINGS_POSITION = True
    settings.RATINGS_INVERSE_PROPENSITY = True
    snapshot = services.snapshot_refresh().snapshot
    effect = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")["results"][
        "on"
    ]["position"]
    html = client.get("/transparency").content.decode()
    card = html.split('data-testid="position-effect"', 1)[1].split("</section>", 1)[0]
    assert f"Position coefficient: {effect['coefficient']:.4f} logits" in " ".join(card.split())
    assert f"(standard error {effect['standard_error']:.4f})" in " ".join(card.split())
    assert "Each vote is weighted by one over the" in card
    body = client.get("/leaderboard.json").json()
    assert body["position"] == effect and body["method"]["position"] is True
    french = client.get("/transparency", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    card = french.split('data-testid="position-effect"', 1)[1].split("</section>", 1)[0]
    assert "Coefficient de position" in card


def test_the_page_says_the_fit_has_no_position_term_by_default(client, rated_models):
    services.snapshot_refresh()
    html = client.get("/transparency").content.decode()
    card = html.split('data-testid="position-effect"', 1)[1].split("</section>", 1)[0]
    assert "has no position term" in " ".join(card.split())
    assert "Votes are not weighted by how often their pair" in card
    assert client.get("/leaderboard.json").json()["position"] is None
