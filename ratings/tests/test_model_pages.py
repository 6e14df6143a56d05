"""A model's page: catalogue, ratings by category, rating over time and record per opponent."""

import datetime
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from arena.tests.factories import ArenaModelFactory
from ratings import services
from ratings.flag_reasons import FLAG_REASON_TEXT, flag_reason_text
from ratings.model_pages import model_opponents_counted, rating_series


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10


@pytest.fixture
def snapshot(rated_models):
    return services.snapshot_refresh().snapshot


def test_model_page_shows_catalogue_rating_and_opponents(client, rated_models, snapshot):
    alpha = rated_models[0]
    alpha.license = "Apache-2.0"
    alpha.outputs_reuse = "allowed"
    alpha.parameter_size = "7B"
    alpha.release_date = datetime.date(2024, 3, 5)
    alpha.context_length = 32768
    alpha.save()

    response = client.get("/models/alpha")
    html = response.content.decode()

    assert response.status_code == 200
    assert '<h1 class="model-name">Alpha Large</h1>' in html
    for text in ("Org A", "Apache-2.0", "7B", "5 March 2024", "32768 tokens"):
        assert text in html
    assert 'data-value="allowed">Allowed</dd>' in html
    overall = next(
        r
        for r in snapshot.payload["categories"][0]["results"]["on"]["models"]
        if r["model"] == "alpha"
    )
    assert f"Ranked <strong>#{overall['rank']}</strong>" in html
    assert f"{overall['rating']:.0f}" in html
    assert 'data-opponent="beta"' in html and 'data-opponent="gamma"' in html
    assert 'href="/models/beta"' in html
    assert 'data-testid="model-over-time"' in html and "<svg" in html


def test_model_page_by_display_name_url_encoded(client, rated_models, snapshot):
    response = client.get("/models/" + quote("Beta Medium"))
    assert response.status_code == 200
    assert 'data-model="beta"' in response.content.decode()


def test_model_page_of_an_unrated_model_says_provisional(client, rated_models, snapshot):
    ArenaModelFactory(slug="newcomer", display_name="Newcomer", is_public=True)
    html = client.get("/models/newcomer").content.decode()
    assert "provisional" in html and 'data-testid="model-not-rated"' in html


@pytest.mark.parametrize("name", ["nobody", "private-one"])
def test_unknown_or_private_model_is_a_404_page(client, db, name):
    ArenaModelFactory(slug="private-one", display_name="Private One", is_public=False)
    response = client.get(f"/models/{name}")
    assert response.status_code == 404
    assert "text/html" in response["Content-Type"]


def test_leaderboard_rows_link_to_model_pages(client, snapshot):
    html = client.get("/leaderboard").content.decode()
    # Without JavaScript the search box stays hidden and every row is listed, in rank order.
    assert 'data-testid="model-search-box" hidden' in html
    assert 'data-sort-key="rank" data-sort-first="ascending" aria-sort="ascending"' in html
    for slug in ("alpha", "beta", "gamma"):
        assert f'<a class="model-title" href="/models/{slug}">' in html


def test_win_rate_against_each_opponent_counts_votes(db, make_vote):
    a = ArenaModelFactory(slug="a-model", display_name="A")
    b = ArenaModelFactory(slug="b-model", display_name="B")
    c = ArenaModelFactory(slug="c-model", display_name="C")
    hidden = ArenaModelFactory(slug="hidden", display_name="Hidden", is_public=False)
    # Against B: 3 wins (2 as side A, 1 as side B), 1 loss, 2 ties -> (3 + 1) / 6.
    make_vote(a, b, "model_a")
    make_vote(a, b, "model_a")
    make_vote(b, a, "model_b")
    make_vote(b, a, "model_a")
    make_vote(a, b, "tie")
    make_vote(b, a, "tie (bothbad)")
    # Against C: 1 loss -> 0.
    make_vote(c, a, "model_a")
    make_vote(a, hidden, "model_a")

    records = model_opponents_counted(model=a)

    assert [r.model for r in records] == ["b-model", "c-model"]
    vs_b, vs_c = records
    assert (vs_b.battles, vs_b.wins, vs_b.losses, vs_b.ties) == (6, 3, 1, 2)
    assert vs_b.win_rate == pytest.approx(4 / 6)
    assert (vs_c.battles, vs_c.wins, vs_c.losses, vs_c.win_rate) == (1, 0, 1, 0.0)


def test_rating_series_has_one_point_per_snapshot(rated_models, make_vote, settings):
    first = services.snapshot_refresh().snapshot
    alpha, beta, _ = rated_models
    for _ in range(6):
        make_vote(beta, alpha, "model_a")
    second = services.snapshot_refresh().snapshot
    assert second.pk != first.pk

    alpha_series, beta_series = rating_series(models=["alpha", "beta"])

    def rating(snapshot, slug):
        rows = snapshot.payload["categories"][0]["results"]["on"]["models"]
        return next(r["rating"] for r in rows if r["model"] == slug)

    assert [p.snapshot_id for p in alpha_series.points] == [first.pk, second.pk]
    assert [p.rating for p in alpha_series.points] == [
        rating(first, "alpha"),
        rating(second, "alpha"),
    ]
    assert [p.rating for p in beta_series.points] == [rating(first, "beta"), rating(second, "beta")]
    assert beta_series.points[1].rating - alpha_series.points[1].rating > (
        beta_series.points[0].rating - alpha_series.points[0].rating
    )
    assert alpha_series.name == "Alpha Large"


def test_rating_series_is_read_again_only_after_a_new_snapshot(rated_models, make_vote):
    services.snapshot_refresh()
    first = rating_series(models=["alpha"])
    with CaptureQueriesContext(connection) as queries:
        assert rating_series(models=["alpha"]) == first
    assert len(queries) == 1  # the newest snapshot's id, no payload
    make_vote(rated_models[1], rated_models[0], "model_a")
    services.snapshot_refresh()
    assert len(rating_series(models=["alpha"])[0].points) == len(first[0].points) + 1


def test_leaderboard_plots_top_models_over_time(client, snapshot):
    html = client.get("/leaderboard").content.decode()
    assert 'data-testid="over-time-plot"' in html
    assert "Top 3 models&#x27; rating across snapshots</title>" in html
    assert "Alpha Large: " in html.split('id="over-time-desc">', 1)[1].split("</desc>", 1)[0]


def test_every_flag_code_reads_as_a_sentence():
    for code in ("identity_leak", "too_fast", "bot_user_agent", "anomalous_voter"):
        text = FLAG_REASON_TEXT[code]
        assert text[0].isupper() and text.endswith(".") and "_" not in text
    assert flag_reason_text("new_check") == "Flagged as new check."


def test_transparency_shows_flag_reasons_as_sentences(client, rated_models, make_vote):
    vote = make_vote(rated_models[0], rated_models[1], "model_a")
    vote.flagged, vote.flags = True, ["too_fast"]
    vote.save()
    html = client.get("/transparency").content.decode()
    assert FLAG_REASON_TEXT["too_fast"] in html
    assert 'data-reason="too_fast"' in html
    assert "<code>too_fast</code>" not in html
