"""Preliminary models and the pinned scale in snapshots, on the page and in the downloads."""

import csv
import io
import json
import re

import pytest

from arena.tests.cli import settings_start_refusal
from arena.tests.factories import ArenaModelFactory
from ratings import services


@pytest.fixture(autouse=True)
def small_board(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 20  # the fixture's models have about 40 each


@pytest.fixture
def newbie(rated_models, make_vote):
    """Beside alpha > beta > gamma: a newcomer that beat alpha, tied beta and beat gamma."""
    model = ArenaModelFactory(slug="newbie", display_name="Newbie")
    alpha, beta, gamma = rated_models
    make_vote(model, alpha, "model_a")
    make_vote(model, beta, "tie")
    make_vote(model, gamma, "model_a")
    return model


def overall(snapshot, style="off"):
    category = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")
    return category["results"][style]


@pytest.mark.parametrize("style", ["on", "off"])
def test_a_newcomer_is_rated_preliminary_and_listed_below_the_established(newbie, style):
    result = overall(services.snapshot_refresh().snapshot, style)
    rows = {m["model"]: m for m in result["models"]}

    assert result["models"][-1]["model"] == "newbie"
    assert rows["newbie"]["preliminary"] and rows["newbie"]["votes"] == 3
    assert not any(rows[m]["preliminary"] for m in ("alpha", "beta", "gamma"))
    assert rows["newbie"]["rank"] > max(rows[m]["rank"] for m in ("alpha", "beta", "gamma"))
    assert result["method"]["centre"] == "established"
    assert result["method"]["established_min_votes"] == 20


def test_page_marks_the_preliminary_model(client, newbie):
    services.snapshot_refresh()
    html = client.get("/leaderboard?style=off").content.decode()
    assert re.findall(r'data-model="([^"]+)"[^>]*data-preliminary="true"', html) == ["newbie"]
    assert html.count('data-testid="preliminary-badge"') == 1
    assert 'data-testid="preliminary-note"' in html


def test_csv_and_json_mark_the_preliminary_model(client, newbie):
    services.snapshot_refresh()
    rows = list(
        csv.DictReader(io.StringIO(client.get("/leaderboard.csv?style=off").content.decode()))
    )
    status = {r["model"]: r["status"] for r in rows}
    assert status == {"alpha": "rated", "beta": "rated", "gamma": "rated", "newbie": "preliminary"}

    body = json.loads(client.get("/leaderboard.json?style=off").content)
    assert {m["model"]: m["preliminary"] for m in body["models"]} == {
        "alpha": False,
        "beta": False,
        "gamma": False,
        "newbie": True,
    }


@pytest.mark.parametrize("anchor", ["absent-model", "newbie"], ids=["missing", "preliminary"])
def test_an_anchor_that_cannot_serve_falls_back_with_a_warning_in_the_snapshot(
    settings, newbie, client, anchor
):
    settings.RATINGS_ANCHOR_MODEL = f"{anchor}=1200"
    snapshot = services.snapshot_refresh().snapshot
    result = overall(snapshot)

    assert snapshot.params["anchor"] == f"{anchor}=1200"
    assert result["method"]["centre"] == "established" and result["method"]["anchor"] is None
    assert any(repr(anchor) in w for w in result["method"]["warnings"])
    established = [m["rating"] for m in result["models"] if not m["preliminary"]]
    assert sum(established) / len(established) == pytest.approx(1000.0)
    assert 'data-testid="scale-warning"' in client.get("/leaderboard?style=off").content.decode()


def test_an_established_anchor_pins_its_rating(settings, newbie):
    settings.RATINGS_ANCHOR_MODEL = "beta=1200"
    result = overall(services.snapshot_refresh().snapshot)
    beta = next(m for m in result["models"] if m["model"] == "beta")
    assert result["method"]["centre"] == "anchor" and beta["rating"] == pytest.approx(1200.0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RATINGS_ESTABLISHED_MIN_VOTES", "-1"),
        ("RATINGS_ANCHOR_MODEL", "gpt-4"),
        ("RATINGS_ANCHOR_MODEL", "gpt-4=-5"),
        ("RATINGS_ANCHOR_MODEL", "=1200"),
    ],
)
def test_a_scale_setting_out_of_range_refuses_to_start_naming_it(name, value):
    settings_start_refusal(name, value)
