"""The leaderboard status the ratings app adds to the arena's model list."""

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from arena.tests.factories import ArenaModelFactory
from ratings import services


@pytest.fixture
def staff_client(db):
    user = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    client = Client()
    client.force_login(user)
    return client


def _rows(client) -> dict[str, str]:
    response = client.get(reverse("admin:arena_arenamodel_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    rows = {}
    for chunk in html.split("<tr")[1:]:
        cell = chunk.split('class="field-leaderboard">', 1)
        if len(cell) == 2:
            rows[chunk] = cell[1].split("</td>", 1)[0]
    return rows


def _status(client, model) -> str:
    for row, status in _rows(client).items():
        if f"/{model.pk}/change/" in row:
            return status
    raise AssertionError(f"no row for {model.slug}")


def test_before_any_snapshot_every_model_is_not_yet_rated(staff_client):
    model = ArenaModelFactory()
    assert _status(staff_client, model) == "not yet rated"


def test_rated_models_are_ranked_and_one_never_voted_on_is_not_yet_rated(
    staff_client, rated_models, settings
):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    newcomer = ArenaModelFactory()
    services.snapshot_refresh()
    for model in rated_models:
        assert _status(staff_client, model).startswith("ranked")
    assert _status(staff_client, newcomer) == "not yet rated"


def test_a_model_that_has_only_won_is_provisional(staff_client, rated_models, make_vote, settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    winner = ArenaModelFactory()
    for _ in range(3):
        make_vote(winner, rated_models[0], "model_a")
    services.snapshot_refresh()
    assert _status(staff_client, winner) == "provisional"


def test_the_column_reads_the_snapshot_once_per_page(staff_client, rated_models, settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    services.snapshot_refresh()
    with CaptureQueriesContext(connection) as queries:
        _rows(staff_client)
    snapshot_reads = [q for q in queries if "ratings_leaderboardsnapshot" in q["sql"]]
    assert len(snapshot_reads) == 1
