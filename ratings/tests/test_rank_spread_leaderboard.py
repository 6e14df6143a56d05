"""Rank spreads and tiers on the leaderboard page (both languages) and in its downloads."""

import csv
import io
import json
import re

import pytest

from arena.tests.factories import ArenaModelFactory
from ratings import services
from ratings.api import LeaderboardOut
from ratings.models import LeaderboardSnapshot


@pytest.fixture(autouse=True)
def small_board(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 20  # the fixture's models have about 40 each


@pytest.fixture
def snapshot(rated_models, make_vote):
    """alpha > beta > gamma, and a preliminary newcomer with three votes."""
    newbie = ArenaModelFactory(slug="newbie", display_name="Newbie")
    alpha, beta, gamma = rated_models
    make_vote(newbie, alpha, "model_a")
    make_vote(newbie, beta, "tie")
    make_vote(newbie, gamma, "model_a")
    return services.snapshot_refresh().snapshot


def overall_rows(snapshot, style="off"):
    category = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")
    return {m["model"]: m for m in category["results"][style]["models"]}


def cells(html: str, kind: str) -> dict[str, str]:
    """Each rated row's ``kind`` cell text (``spread`` or ``tier``), by model."""
    found = re.findall(
        rf'<tr data-model="([^"]+)".*?<td class="[^"]*\b{kind}\b[^"]*"[^>]*>(.*?)</td>', html, re.S
    )
    return {model: re.sub(r"<[^>]+>", "", text).strip() for model, text in found}


def without_spreads(snapshot) -> LeaderboardSnapshot:
    """A newer snapshot as one written before rank spreads and tiers."""
    old = json.loads(json.dumps(snapshot.payload))
    for category in old["categories"]:
        for result in (category.get("results") or {}).values():
            for row in (result or {}).get("models", []):
                row.pop("rank_worst", None)
                row.pop("tier", None)
    return LeaderboardSnapshot.objects.create(
        vote_high_water=snapshot.vote_high_water + 1,
        n_votes=snapshot.n_votes,
        params=snapshot.params,
        params_digest=snapshot.params_digest,
        duration_seconds=0,
        payload=old,
    )


def test_the_page_shows_each_rank_spread_and_tier_and_none_for_the_preliminary(client, snapshot):
    rows = overall_rows(snapshot)
    html = client.get("/leaderboard?style=off").content.decode()

    spread = cells(html, "spread")
    for model, row in rows.items():
        first, last = row["rank"], row["rank_worst"]
        assert spread[model] == (str(first) if first == last else f"{first}–{last}")
    tiers = cells(html, "tier")
    assert tiers["alpha"] == "1" and tiers["newbie"] == "—"
    assert {tiers[m] for m in ("beta", "gamma")} <= {"1", "2", "3"}
    assert rows["newbie"]["tier"] is None
    assert ">Rank spread<" in html and ">Tier<" in html
    assert 'data-testid="tier-note"' in html


def test_the_page_in_french_names_the_rank_spread_and_the_tiers(client, snapshot):
    html = client.get("/leaderboard?style=off", HTTP_ACCEPT_LANGUAGE="fr").content.decode()

    assert ">Plage de rangs<" in html and ">Classe<" in html
    assert "Rank spread" not in html and ">Tier<" not in html
    assert "Sans classe" in html  # the preliminary row's empty tier, said for screen readers


def test_a_snapshot_without_rank_spreads_renders_without_those_columns(client, snapshot):
    without_spreads(snapshot)
    response = client.get("/leaderboard?style=off")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-model="alpha"' in html
    assert cells(html, "spread") == {} and cells(html, "tier") == {}
    assert "Rank spread" not in html and 'data-testid="tier-note"' not in html


def test_the_csv_and_json_carry_the_rank_spread_and_tier(client, snapshot):
    rows = overall_rows(snapshot)
    table = list(
        csv.DictReader(io.StringIO(client.get("/leaderboard.csv?style=off").content.decode()))
    )
    rated = {r["model"]: r for r in table if r["status"] in ("rated", "preliminary")}
    for model, row in rows.items():
        assert rated[model]["rank_worst"] == str(row["rank_worst"])
    assert rated["alpha"]["tier"] == "1" and rated["newbie"]["tier"] == ""

    body = json.loads(client.get("/leaderboard.json?style=off").content)
    LeaderboardOut.model_validate(body)
    models = {m["model"]: m for m in body["models"]}
    assert {m: models[m]["rank_worst"] for m in rows} == {
        m: r["rank_worst"] for m, r in rows.items()
    }
    assert models["alpha"]["tier"] == 1 and models["newbie"]["tier"] is None


def test_downloads_of_a_snapshot_without_rank_spreads_leave_them_empty(client, snapshot):
    without_spreads(snapshot)
    table = list(
        csv.DictReader(io.StringIO(client.get("/leaderboard.csv?style=off").content.decode()))
    )
    assert table and all(r["rank_worst"] == "" and r["tier"] == "" for r in table)

    response = client.get("/leaderboard.json?style=off")
    assert response.status_code == 200
    body = json.loads(response.content)
    LeaderboardOut.model_validate(body)
    assert all(m["rank_worst"] is None and m["tier"] is None for m in body["models"])
