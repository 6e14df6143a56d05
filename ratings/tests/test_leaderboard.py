"""The leaderboard page and its downloads read the latest snapshot and never fit."""

import csv
import io
import json
import logging
import re
from unittest import mock

import pytest

from ratings import engine, plots, services
from ratings.api import LeaderboardOut
from ratings.models import LeaderboardSnapshot


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    # The fixtures' models have about 40 votes each: established at this board's scale.
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10


@pytest.fixture
def snapshot(rated_models):
    return services.snapshot_refresh().snapshot


@pytest.fixture
def no_engine():
    """Any fit during the request fails the test."""
    boom = AssertionError("the engine ran during a request")
    with (
        mock.patch.object(engine, "rate", side_effect=boom),
        mock.patch.object(engine, "flatten_conv_metadata", side_effect=boom),
    ):
        yield


def table_models(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split('<tr data-model="')[1:]]


def test_page_without_a_snapshot_says_not_computed_yet(client, db):
    response = client.get("/leaderboard")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Not computed yet" in html
    assert 'data-testid="leaderboard-table"' not in html


def test_downloads_without_a_snapshot_are_404_with_a_reason(client, db):
    csv_response = client.get("/leaderboard.csv")
    json_response = client.get("/leaderboard.json")
    assert csv_response.status_code == 404 and b"not been computed" in csv_response.content
    assert json_response.status_code == 404
    assert json_response.json()["error"]["code"] == "not_computed"


def test_page_renders_the_latest_snapshot_without_calling_the_engine(client, snapshot, no_engine):
    # ``snapshot`` is computed before ``no_engine`` patches the engine (fixture order).
    response = client.get("/leaderboard")
    html = response.content.decode()

    assert response.status_code == 200
    assert table_models(html) == [
        m["model"] for m in snapshot.payload["categories"][0]["results"]["on"]["models"]
    ]
    assert "Alpha Large" in html and "Org A" in html and "Apache-2.0" in html
    assert 'data-testid="last-updated"' in html
    assert f'<time datetime="{snapshot.created_at.isoformat()}">' in html
    assert response.context["request"].resolver_match.url_name == "leaderboard"
    for testid in ("forest-plot", "winrate-heatmap", "count-heatmap", "style-plot"):
        assert f'data-testid="{testid}"' in html


def test_page_shows_the_newest_of_several_snapshots(client, snapshot, rated_models, make_vote):
    alpha, beta, gamma = rated_models
    for _ in range(40):
        make_vote(gamma, alpha, "model_a")
    newer = services.snapshot_refresh().snapshot

    html = client.get("/leaderboard?style=off").content.decode()

    assert f"Snapshot #{newer.pk}" in html
    assert table_models(html)[0] == "gamma"


def test_style_toggle_switches_between_the_two_fits(client, snapshot, no_engine):
    on = client.get("/leaderboard?style=on")
    off = client.get("/leaderboard?style=off")

    overall = snapshot.payload["categories"][0]["results"]
    rating_on = f"{overall['on']['models'][0]['rating']:.0f}"
    rating_off = f"{overall['off']['models'][0]['rating']:.0f}"
    assert rating_on != rating_off
    assert f'<td class="num rating">{rating_on}</td>' in on.content.decode()
    assert f'<td class="num rating">{rating_off}</td>' in off.content.decode()
    assert 'data-testid="style-plot"' in on.content.decode()
    assert 'data-testid="style-plot"' not in off.content.decode()
    assert b'data-testid="style-toggle" checked' in on.content
    assert b'data-testid="style-toggle" checked' not in off.content


def test_category_select_shows_that_category_or_its_lack_of_votes(client, snapshot, no_engine):
    english = client.get("/leaderboard?category=lang-en").content.decode()
    coding = client.get("/leaderboard?category=coding").content.decode()
    unknown = client.get("/leaderboard?category=nope").content.decode()

    assert '<option value="lang-en" selected>' in english
    assert "Ratings · English" in english
    assert '<option value="coding" selected>' in coding
    assert "Not enough votes" in coding and 'data-testid="leaderboard-table"' not in coding
    assert '<option value="overall" selected>' in unknown
    assert 'data-testid="leaderboard-table"' in unknown


def insufficient_section(html: str) -> str:
    return html.split('data-testid="category-insufficient"', 1)[1].split("</section>", 1)[0]


def category_of(snapshot, key: str) -> dict:
    return next(c for c in snapshot.payload["categories"] if c["key"] == key)


def test_a_category_short_of_votes_is_worded_in_french_with_its_figures(
    client, snapshot, no_engine
):
    coding = category_of(snapshot, "coding")
    assert coding["reason"] == {"code": "too_few_votes", "votes": coding["n_votes"], "needed": 10}

    html = client.get("/leaderboard?category=coding", HTTP_ACCEPT_LANGUAGE="fr").content.decode()

    section = insufficient_section(html)
    assert f"{coding['n_votes']} des 10 votes qu’il faut pour classer cette catégorie" in section
    assert "Not enough votes" not in html and "votes over" not in html
    english = client.get("/leaderboard?category=coding").content.decode()
    assert f"{coding['n_votes']} of the 10 votes this category needs" in english


def test_the_json_download_gives_the_reasons_code_and_its_english_words(
    client, snapshot, no_engine
):
    body = client.get(
        "/leaderboard.json?category=coding", HTTP_ACCEPT_LANGUAGE="fr"
    ).json()  # downloads are never localised
    votes = category_of(snapshot, "coding")["n_votes"]
    assert body["reason_code"] == {"code": "too_few_votes", "votes": votes, "needed": 10}
    assert body["reason"].startswith("Not enough votes yet: ")
    LeaderboardOut.model_validate(body)  # as the API document describes it


def test_an_engine_exceptions_text_is_logged_never_stored_or_shown(client, rated_models, caplog):
    raw = "raw engine words <b>7</b>"
    with (
        mock.patch.object(
            services.FrameVotes, "fit", side_effect=engine.CannotRateError(raw), autospec=True
        ),
        caplog.at_level(logging.INFO, logger="ratings.services"),
    ):
        snapshot = services.snapshot_refresh().snapshot

    overall = category_of(snapshot, "overall")
    assert overall["status"] == "insufficient"
    failed = {"code": "fit_failed", "error": "CannotRateError"}
    assert overall["reason"] == failed and overall["reasons"] == {"on": failed, "off": failed}
    assert "raw engine words" not in json.dumps(snapshot.payload)
    assert any("raw engine words" in r.getMessage() for r in caplog.records)
    for language in ("en", "fr"):
        html = client.get("/leaderboard", HTTP_ACCEPT_LANGUAGE=language).content.decode()
        assert "raw engine words" not in html and "CannotRateError" not in html
    french = client.get("/leaderboard", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Pas encore assez de votes pour classer cette vue" in insufficient_section(french)


def test_a_snapshot_written_with_english_sentences_is_still_worded_in_french(
    client, snapshot, no_engine
):
    old = json.loads(json.dumps(snapshot.payload))
    coding = next(c for c in old["categories"] if c["key"] == "coding")
    coding["reason"] = (
        "Not enough votes yet: 3 votes over 2 models (at least 50 votes and 2 models are needed)."
    )
    LeaderboardSnapshot.objects.create(
        vote_high_water=snapshot.vote_high_water + 1,
        n_votes=snapshot.n_votes,
        params=snapshot.params,
        params_digest=snapshot.params_digest,
        duration_seconds=0,
        payload=old,
    )

    html = client.get("/leaderboard?category=coding", HTTP_ACCEPT_LANGUAGE="fr").content.decode()

    assert "3 des 50 votes qu’il faut pour classer cette catégorie" in insufficient_section(html)
    assert "Not enough votes" not in html


def test_a_deactivated_model_is_still_listed_and_marked_retired(client, rated_models):
    rated_models[1].is_active = False
    rated_models[1].save()
    services.snapshot_refresh()

    html = client.get("/leaderboard").content.decode()

    assert "beta" in table_models(html)
    assert re.search(r'<tr data-model="beta" class="retired"[ >]', html)
    assert ">retired</span>" in html


def test_csv_download_lists_the_chosen_view(client, snapshot, no_engine):
    response = client.get("/leaderboard.csv?category=overall&style=off")

    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    assert "overall-style-off.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    expected = snapshot.payload["categories"][0]["results"]["off"]["models"]
    assert [r["model"] for r in rows] == [m["model"] for m in expected]
    assert rows[0]["name"] == "Alpha Large" and rows[0]["organization"] == "Org A"
    assert float(rows[0]["rating"]) == pytest.approx(expected[0]["rating"], abs=0.01)
    assert rows[0]["active"] == "True"


def test_json_download_carries_the_view_and_the_snapshot_facts(client, snapshot, no_engine):
    body = json.loads(client.get("/leaderboard.json?category=lang-en&style=on").content)

    assert body["snapshot"]["id"] == snapshot.pk
    assert body["snapshot"]["vote_high_water"] == snapshot.vote_high_water
    assert body["category"]["key"] == "lang-en"
    assert body["style_control"] is True
    assert [m["model"] for m in body["models"]][0] == "alpha"
    assert set(body["style_coefficients"]) == {"length", "header", "list", "bold"}
    assert body["matrices"]["models"] == [m["model"] for m in body["models"]]


def test_download_links_keep_the_chosen_category_and_style(client, snapshot):
    html = client.get("/leaderboard?category=lang-en&style=off").content.decode()
    assert 'href="/leaderboard.csv?category=lang-en&amp;style=off"' in html
    assert 'href="/leaderboard.json?category=lang-en&amp;style=off"' in html


def test_charts_are_accessible_svg_with_title_and_description(client, snapshot):
    html = client.get("/leaderboard").content.decode()
    for plot_id in ("forest", "winrate", "counts", "style"):
        assert f'aria-labelledby="{plot_id}-title {plot_id}-desc"' in html
        assert f'<title id="{plot_id}-title">' in html
    assert '<script type="module" src="/static/js/leaderboard.' in html
    assert "cdn" not in html.lower()


def test_chart_text_is_escaped():
    svg = plots.forest_plot(
        [
            {
                "model": "x",
                "name": "<script>alert(1)</script>",
                "rating": 1000.0,
                "rating_lower": 990.0,
                "rating_upper": 1010.0,
                "rank": 1,
            }
        ]
    )
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_nice_ticks_cover_the_range_with_round_steps():
    assert plots.nice_ticks(712, 1206) == [700, 800, 900, 1000, 1100, 1200, 1300]
    assert plots.nice_ticks(-0.3, 0.3, 7) == [-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3]


def test_the_page_and_json_count_rated_votes_by_battle_source(client, rated_models, make_vote):
    from arena.models import Battle

    alpha, beta, _ = rated_models
    mixed = [make_vote(alpha, beta, w) for w in ("model_a", "model_b", "tie")]
    Battle.objects.filter(pk__in=[v.battle_id for v in mixed]).update(
        source=Battle.Source.MIXED, live_side="a"
    )
    snapshot = services.snapshot_refresh().snapshot
    assert snapshot.payload["by_source"] == {"pool": 60, "mixed": 3}

    html = client.get("/leaderboard").content.decode()
    counts = html.split('data-testid="votes-by-source"', 1)[1].split("</span>)")[0] + "</span>"
    assert '<span data-source="pool">60 pool</span>' in counts
    assert '<span data-source="mixed">3 mixed</span>' in counts
    body = json.loads(client.get("/leaderboard.json").content)
    assert body["snapshot"]["by_source"] == {"pool": 60, "mixed": 3}
