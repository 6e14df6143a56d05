"""The leaderboard, its downloads, /transparency and the model pages read the newest snapshot and
what was derived from it once (``ratings.page_cache``): a visit's queries do not grow with the
votes, the record per opponent is the fit's (``rated_winner``), and a new snapshot is what
changes a page."""

import random
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from arena.models import ArenaModel, Reaction
from arena.tests.factories import ArenaModelFactory
from arena.transparency import pool_recognisability_refresh
from ratings import services
from ratings.model_pages import model_opponents, model_opponents_counted
from ratings.models import LeaderboardSnapshot

pytestmark = pytest.mark.django_db

# Every view the snapshot feeds, with a category and style in the query where it takes one.
PAGES = (
    "/leaderboard",
    "/leaderboard?category=coding&style=off",
    "/leaderboard.json",
    "/leaderboard.csv?style=off",
    "/transparency",
    "/models/m-0",
)
# A visit after the first one for its snapshot: the head of the newest snapshot, and the model
# a model page names (/transparency: the drawable models, read live).
WARM_QUERIES = 2
COLD_QUERIES = 6


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 10


@pytest.fixture
def arena(make_vote):
    """Five public models and a function adding ``n`` votes among them (some coding ones)."""
    models = [ArenaModelFactory(slug=f"m-{i}", display_name=f"Model {i}") for i in range(5)]
    rng = random.Random(3)

    def add(n):
        for i in range(n):
            a, b = rng.sample(models, 2)
            winner = rng.choice(["model_a", "model_a", "model_b", "tie", "tie (bothbad)"])
            make_vote(a, b, winner, category="coding" if i % 3 == 0 else "writing")

    return add


def _html(response):
    """The page without its CSRF token (a new one each visit)."""
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", response.content.decode())


def _queries(client, path):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200, path
    return len(captured)


def _visits(client):
    """Each page's queries on its first visit for the snapshot and on the next one. The pool's
    recognisability figures are a task's (queued by the first visit, run inline where tasks
    are eager): computed beforehand, so that the count is the page's in every setup."""
    pool_recognisability_refresh()
    cold = {path: _queries(client, path) for path in PAGES}
    warm = {path: _queries(client, path) for path in PAGES}
    return cold, warm


def test_each_page_runs_the_same_few_queries_with_10_votes_and_with_500(
    client, arena, django_assert_max_num_queries
):
    arena(10)
    services.snapshot_refresh()
    cold_small, warm_small = _visits(client)
    arena(490)
    services.snapshot_refresh()
    cold_large, warm_large = _visits(client)

    assert warm_large == warm_small
    # The first visit reads the snapshot once more (and the rating series); still no count of
    # votes, so it stays bounded too.
    assert max(cold_small.values()) <= COLD_QUERIES
    assert max(cold_large.values()) <= COLD_QUERIES
    for path in PAGES:
        with django_assert_max_num_queries(WARM_QUERIES):
            assert client.get(path).status_code == 200


def test_a_page_changes_with_a_new_snapshot_not_with_new_votes(client, arena):
    arena(30)
    services.snapshot_refresh()
    before = _html(client.get("/models/m-0"))
    arena(30)  # counted at the next snapshot, not before
    assert _html(client.get("/models/m-0")) == before
    snapshot = services.snapshot_refresh().snapshot
    after = _html(client.get("/models/m-0"))
    assert f"snapshot #{snapshot.pk}" in after and after != before


def test_the_snapshots_record_per_opponent_is_the_one_counted_from_the_votes(arena):
    arena(80)
    snapshot = services.snapshot_refresh().snapshot
    for slug in ("m-0", "m-3"):
        model = ArenaModel.objects.get(slug=slug)
        assert model_opponents(slug=slug, snapshot=snapshot) == model_opponents_counted(model=model)


def test_the_record_per_opponent_counts_the_rated_winner(client, make_vote, settings):
    """A tie that reactions decide (RATINGS_COUNT_REACTIONS) is the liked side's win, on the
    page as in the fit, whichever refit path wrote the snapshot."""
    settings.RATINGS_COUNT_REACTIONS = True
    north, south = ArenaModelFactory(slug="north"), ArenaModelFactory(slug="south")
    tie = make_vote(north, south, "tie")
    Reaction.objects.create(battle=tie.battle, side="a", liked=True)
    Reaction.objects.create(battle=tie.battle, side="b", liked=False)
    make_vote(north, south, "model_b")
    make_vote(south, north, "tie")
    for threshold in (10_000, 0):  # in memory, then streamed through Parquet
        settings.RATINGS_STREAM_THRESHOLD = threshold
        snapshot = services.snapshot_refresh(force=True).snapshot
        (vs_south,) = model_opponents(slug="north", snapshot=snapshot)
        assert (vs_south.wins, vs_south.losses, vs_south.ties) == (1, 1, 1)
        html = client.get("/models/north").content.decode()
        row = html.split('data-opponent="south"', 1)[1].split("</tr>", 1)[0]
        assert "50%" in row


def test_a_snapshot_without_records_counts_them_once(client, arena):
    """A snapshot written before the records were kept: the first visit counts them from the
    votes, the next ones read what it kept."""
    arena(20)
    snapshot = services.snapshot_refresh().snapshot
    payload = dict(snapshot.payload)
    payload.pop("records")
    payload.pop("served")
    LeaderboardSnapshot.objects.create(
        vote_high_water=snapshot.vote_high_water,
        n_votes=snapshot.n_votes,
        params=snapshot.params,
        params_digest=snapshot.params_digest,
        duration_seconds=0.0,
        payload=payload,
    )
    first = _html(client.get("/models/m-0"))
    assert 'data-opponent="m-1"' in first
    assert 'data-model="m-1"' in client.get("/transparency").content.decode()
    again = _queries(client, "/models/m-0")
    assert again <= WARM_QUERIES
    assert _html(client.get("/models/m-0")) == first
