"""Provisional models in snapshots, on the page and in the downloads: the board never blanks."""

import csv
import io
import json
import logging
from unittest import mock

import pytest

from arena.tests.factories import ArenaModelFactory
from ratings import engine, services


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    # The fixtures' models have about 40 votes each: established at this board's scale.
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10


@pytest.fixture
def newcomers(rated_models, make_vote):
    """Beside alpha > beta > gamma: a newcomer that won its three battles, one that lost its
    two, and two live models that only met each other."""
    newbie = ArenaModelFactory(slug="newbie", display_name="Newbie", organization="=cmd|calc")
    loser = ArenaModelFactory(slug="loser", display_name="Loser One")
    live_x = ArenaModelFactory(slug="live-x", display_name="Live X")
    live_y = ArenaModelFactory(slug="live-y", display_name="Live Y")
    alpha, beta, gamma = rated_models
    make_vote(newbie, alpha, "model_a")
    make_vote(beta, newbie, "model_b")
    make_vote(newbie, gamma, "model_a")
    make_vote(loser, alpha, "model_b")
    make_vote(gamma, loser, "model_a")
    make_vote(live_x, live_y, "model_a")
    make_vote(live_y, live_x, "model_a")
    make_vote(live_x, live_y, "tie")
    return services.snapshot_refresh().snapshot


def overall(snapshot):
    return next(c for c in snapshot.payload["categories"] if c["key"] == "overall")


def by_model(entries):
    return {e["model"]: e for e in entries}


@pytest.mark.parametrize("style", ["on", "off"])
def test_snapshot_rates_the_connected_models_and_lists_the_rest_with_their_record(newcomers, style):
    category = overall(newcomers)
    result = category["results"][style]

    assert category["status"] == "ok"
    assert [m["model"] for m in result["models"]] == ["alpha", "beta", "gamma"]
    entries = by_model(result["provisional"])
    assert entries["newbie"] == {
        "model": "newbie",
        "battles": 3,
        "wins": 3,
        "losses": 0,
        "ties": 0,
        "reason": "no_losses",
    }
    assert entries["loser"]["reason"] == "no_wins" and entries["loser"]["losses"] == 2
    assert entries["live-x"]["reason"] == entries["live-y"]["reason"] == "not_connected"
    assert (entries["live-x"]["wins"], entries["live-x"]["ties"]) == (1, 1)
    assert result["n_battles"] == 60 and result["n_battles_input"] == 68
    assert "newbie" in newcomers.payload["models"]


def test_a_category_below_the_vote_minimum_lists_every_model_as_provisional(
    rated_models, make_vote
):
    alpha, beta, _ = rated_models
    make_vote(alpha, beta, "model_a", category="coding")
    make_vote(beta, alpha, "model_b", category="coding")

    coding = next(
        c
        for c in services.snapshot_refresh().snapshot.payload["categories"]
        if c["key"] == "coding"
    )

    assert coding["status"] == "insufficient"
    for style in ("on", "off"):
        entries = by_model(coding["provisional"][style])
        assert set(entries) == {"alpha", "beta"}
        assert entries["alpha"]["wins"] == 2 and entries["alpha"]["reason"] == "no_losses"
        assert entries["beta"]["reason"] == "no_wins"


def test_no_two_ratable_models_mark_the_category_and_list_everyone(db, make_vote):
    a, b = ArenaModelFactory(slug="a"), ArenaModelFactory(slug="b")
    for _ in range(12):
        make_vote(a, b, "model_a")

    category = overall(services.snapshot_refresh().snapshot)

    assert category["status"] == "insufficient"
    assert category["reason"] == {"code": "no_comparable_models"}
    assert category["reasons"] == {"on": category["reason"], "off": category["reason"]}
    assert {e["model"]: e["reason"] for e in category["provisional"]["off"]} == {
        "a": "no_losses",
        "b": "no_wins",
    }


MIXED_FIX = "Mixed battles fix that"


def test_the_page_marks_not_connected_models_and_says_mixed_battles_connect_them(client, newcomers):
    html = client.get("/leaderboard?category=overall&style=off").content.decode()

    _, _, below = html.partition('data-testid="provisional"')
    row = below.split('<tr data-provisional="live-x" data-reason="not_connected"')[1]
    row = row.split("</tr>")[0]
    assert 'data-testid="not-connected-badge">not connected</span>' in row
    assert '<td class="num">3</td>' in row  # its record: three battles
    assert MIXED_FIX in row
    assert 'data-testid="not-connected-note"' in below and "Mixed battles connect them" in below


def test_the_page_has_no_not_connected_note_without_such_models(client, rated_models, make_vote):
    newbie = ArenaModelFactory(slug="newbie")
    make_vote(newbie, rated_models[0], "model_a")
    services.snapshot_refresh()

    html = client.get("/leaderboard?category=overall&style=off").content.decode()

    assert 'data-provisional="newbie" data-reason="no_losses"' in html
    assert 'data-testid="not-connected-note"' not in html


def test_downloads_give_not_connected_models_their_record_and_the_fix_in_words(client, newcomers):
    text = client.get("/leaderboard.csv?category=overall&style=off").content.decode()
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(text))}
    live_x = rows["live-x"]
    assert live_x["status"] == "provisional" and live_x["reason"] == "not_connected"
    assert (live_x["battles"], live_x["wins"], live_x["losses"], live_x["ties"]) == (
        "3",
        "1",
        "1",
        "1",
    )
    assert MIXED_FIX in live_x["reason_text"] and "ARENA_BRIDGE_SHARE" in live_x["reason_text"]
    assert rows["alpha"]["reason_text"] == ""

    body = json.loads(client.get("/leaderboard.json?category=overall&style=off").content)
    entry = by_model(body["provisional"])["live-y"]
    assert entry["reason"] == "not_connected" and entry["battles"] == 3
    assert MIXED_FIX in entry["reason_text"]


def test_hidden_models_are_left_out_of_the_provisional_list_too(newcomers):
    from arena.models import ArenaModel

    ArenaModel.objects.filter(slug="newbie").update(is_public=False)

    snapshot = services.snapshot_refresh(force=True).snapshot

    entries = by_model(overall(snapshot)["results"]["off"]["provisional"])
    assert "newbie" not in entries and "loser" in entries
    assert "newbie" not in snapshot.payload["models"]


def test_an_unexpected_engine_error_fails_the_run_and_is_logged(rated_models, caplog):
    with (
        mock.patch.object(engine, "rate", side_effect=ZeroDivisionError("a bug")),
        caplog.at_level(logging.ERROR, logger="ratings.services"),
        pytest.raises(ZeroDivisionError),
    ):
        services.snapshot_refresh()
    assert "overall" in caplog.text


def test_the_page_lists_provisional_models_below_the_table_with_the_reason_in_words(
    client, newcomers
):
    html = client.get("/leaderboard?category=overall&style=off").content.decode()

    table, _, below = html.partition('data-testid="provisional"')
    assert '<tr data-model="alpha"' in table and 'data-model="newbie"' not in table
    assert "Needs more battles" in below
    assert '<tr data-provisional="newbie" data-reason="no_losses"' in below
    assert '<tr data-provisional="loser" data-reason="no_wins"' in below
    assert '<tr data-provisional="live-x" data-reason="not_connected"' in below
    assert "No rated model has beaten or tied it yet" in below
    assert "It has not met the rated models" in below
    assert ' style="' not in below.split("</section>")[0]  # the CSP allows no inline styles


def test_an_insufficient_view_still_lists_its_models(client, db, make_vote):
    a, b = ArenaModelFactory(slug="a"), ArenaModelFactory(slug="b")
    for _ in range(12):
        make_vote(a, b, "model_a")
    services.snapshot_refresh()

    html = client.get("/leaderboard?style=off").content.decode()

    assert 'data-testid="category-insufficient"' in html
    assert '<tr data-provisional="a" data-reason="no_losses"' in html
    assert '<tr data-provisional="b" data-reason="no_wins"' in html


def test_csv_has_a_status_column_with_the_provisional_records(client, newcomers):
    response = client.get("/leaderboard.csv?category=overall&style=off")

    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["status"] for r in rows] == ["rated"] * 3 + ["provisional"] * 4
    rated = rows[0]
    assert rated["model"] == "alpha" and rated["rating"] and rated["reason"] == ""
    newbie = next(r for r in rows if r["model"] == "newbie")
    assert (newbie["battles"], newbie["wins"], newbie["losses"], newbie["ties"]) == (
        "3",
        "3",
        "0",
        "0",
    )
    assert newbie["reason"] == "no_losses" and newbie["rating"] == "" and newbie["rank"] == ""


def test_csv_neutralises_text_cells_that_would_run_as_formulas_but_not_numbers(client, newcomers):
    from arena.models import ArenaModel

    ArenaModel.objects.filter(slug="gamma").update(display_name="@SUM(A1:A9)")
    ArenaModel.objects.filter(slug="beta").update(display_name="-1+2", organization="+x")
    snapshot = services.snapshot_refresh(force=True).snapshot
    gamma_rating = next(
        m["rating"] for m in overall(snapshot)["results"]["off"]["models"] if m["model"] == "gamma"
    )

    text = client.get("/leaderboard.csv?category=overall&style=off").content.decode()

    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(text))}
    assert rows["gamma"]["name"] == "'@SUM(A1:A9)"
    assert rows["beta"]["name"] == "'-1+2" and rows["beta"]["organization"] == "'+x"
    assert rows["newbie"]["organization"] == "'=cmd|calc"
    assert float(rows["gamma"]["rating"]) == pytest.approx(gamma_rating, abs=0.01)
    assert not any(r["rating"].startswith("'") for r in rows.values())


def test_json_download_has_a_provisional_list(client, newcomers):
    body = json.loads(client.get("/leaderboard.json?category=overall&style=on").content)

    assert [m["model"] for m in body["models"]] == ["alpha", "beta", "gamma"]
    entries = by_model(body["provisional"])
    assert set(entries) == {"newbie", "loser", "live-x", "live-y"}
    assert set(entries["newbie"]) == {
        "model",
        "name",
        "organization",
        "license",
        "active",
        "battles",
        "wins",
        "losses",
        "ties",
        "reason",
        "reason_text",
    }
    assert {k: v for k, v in entries["newbie"].items() if k not in ("license", "reason_text")} == {
        "model": "newbie",
        "name": "Newbie",
        "organization": "=cmd|calc",
        "active": True,
        "battles": 3,
        "wins": 3,
        "losses": 0,
        "ties": 0,
        "reason": "no_losses",
    }
    assert body["n_battles"] == 60 and body["n_battles_input"] == 68


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=1+1", "'=1+1"),
        ("+x", "'+x"),
        ("-x", "'-x"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("gpt-4", "gpt-4"),
        (-12.5, -12.5),
        (-3, -3),
        (None, None),
    ],
)
def test_neutralise_prefixes_formula_text_and_leaves_numbers(value, cell):
    from ratings.csv_cells import neutralise

    assert neutralise(value) == cell


def test_two_models_whose_answers_always_look_the_same_are_rated_in_both_views(
    db, make_vote, settings
):
    """make_vote's default answers: side A's has a header, a list and bold, side B's none, so
    with A always the same model every style difference is that model's contrast."""
    settings.RATINGS_MIN_CATEGORY_VOTES = 4
    a, b = ArenaModelFactory(slug="a"), ArenaModelFactory(slug="b")
    for winner in ("model_a", "model_a", "model_a", "model_b", "tie", "tie (bothbad)"):
        make_vote(a, b, winner)

    category = overall(services.snapshot_refresh().snapshot)

    assert category["status"] == "ok"
    for style in ("on", "off"):
        assert [m["model"] for m in category["results"][style]["models"]] == ["a", "b"]
    method = category["results"]["on"]["method"]
    assert method["degenerate_style_elements"] == ["length", "header", "list", "bold"]
