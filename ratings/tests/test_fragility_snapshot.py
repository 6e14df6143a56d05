"""The fragility audit in the snapshot, on /transparency and in the leaderboard download."""

import pytest
from django.test import Client

from ratings import services
from ratings.models import LeaderboardSnapshot


@pytest.fixture(autouse=True)
def small_board(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10


def overall(snapshot):
    return next(c for c in snapshot.payload["categories"] if c["key"] == "overall")


def test_the_snapshot_holds_the_fragility_of_the_top_ranks(rated_models):
    snapshot = services.snapshot_refresh().snapshot
    assert snapshot.params["fragility_top"] == services.FRAGILITY_TOP
    off = overall(snapshot)["results"]["off"]
    audit = off["fragility"]
    order = [m["model"] for m in off["models"]]
    assert [(p["upper"], p["lower"]) for p in audit["pairs"]] == list(
        zip(order, order[1:], strict=False)
    )
    assert audit["leader"] == order[0]
    assert audit["refits"] > 0
    for pair in audit["pairs"]:
        for kind in ("removal", "flip"):
            bound = pair[kind]
            if bound is not None:
                assert bound["votes"] >= 1
                assert bound["exact"] == (bound["votes"] == 1)


def test_hidden_models_are_not_audited(rated_models):
    alpha = rated_models[0]
    alpha.is_public = False
    alpha.save()
    snapshot = services.snapshot_refresh().snapshot
    audit = overall(snapshot)["results"]["off"]["fragility"]
    assert [(p["upper"], p["lower"]) for p in audit["pairs"]] == [("beta", "gamma")]


def test_the_download_carries_the_view_fragility(rated_models):
    services.snapshot_refresh()
    body = Client().get("/leaderboard.json?style=off").json()
    assert body["fragility"]["pairs"][0]["upper"] == body["models"][0]["model"]


def test_transparency_shows_the_fragility_table_in_french(rated_models):
    services.snapshot_refresh()
    page = Client(headers={"accept-language": "fr"}).get("/transparency").content.decode()
    assert 'data-testid="fragility-table"' in page
    assert "Votes retirés pour les intervertir" in page
    assert "Alpha Large au-dessus de Beta Medium" in page
    assert "au plus" in page or "exactement" in page


def test_a_snapshot_without_the_audit_still_renders(rated_models):
    snapshot = services.snapshot_refresh().snapshot
    payload = snapshot.payload
    for category in payload["categories"]:
        for result in category["results"].values():
            if result:
                result.pop("fragility", None)
    LeaderboardSnapshot.objects.filter(pk=snapshot.pk).delete()
    LeaderboardSnapshot.objects.create(
        vote_high_water=snapshot.vote_high_water,
        n_votes=snapshot.n_votes,
        params=snapshot.params,
        params_digest=snapshot.params_digest,
        duration_seconds=0.0,
        payload=payload,
    )
    page = Client().get("/transparency")
    assert page.status_code == 200
    assert "has no fragility audit" in page.content.decode()
    assert Client().get("/leaderboard.json").json()["fragility"] is None


def test_only_the_overall_view_is_audited(rated_models, settings):
    """The audit costs a few fits of its view: the categories' views go without it."""
    settings.RATINGS_MIN_CATEGORY_VOTES = 1
    snapshot = services.snapshot_refresh(force=True).snapshot
    audited = {
        (category["key"], style)
        for category in snapshot.payload["categories"]
        for style, result in (category.get("results") or {}).items()
        if result and "fragility" in result
    }
    rated = {
        category["key"]
        for category in snapshot.payload["categories"]
        if any(category.get("results") or {})
    }
    assert len(rated) > 1  # categories other than the overall view were rated
    assert {key for key, _ in audited} == {"overall"}
