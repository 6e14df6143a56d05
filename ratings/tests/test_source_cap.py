"""Each source's influence is bounded: a source (an address hash, or a session where no address
was kept) counts at most ``max(RATINGS_SOURCE_MIN_VOTES, RATINGS_SOURCE_MAX_SHARE x the model's
votes from the other sources)`` rated votes on a model, the first by vote id, on both refit paths;
the snapshot and /transparency say how many votes were left out."""

import pytest

from arena.models import Vote
from arena.tests.cli import settings_start_refusal
from ratings import services, vote_sources
from ratings.tests.test_services_stream import assert_same, refresh_both


@pytest.fixture(autouse=True)
def defaults(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_SOURCE_MIN_VOTES = 20
    settings.RATINGS_SOURCE_MAX_SHARE = 0.15
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 0


def cast(make_vote, winner_model, loser_model, n, *, ip_hash="", voters=1):
    """``n`` votes for ``winner_model`` over ``loser_model`` from one address (``ip_hash``) spread
    over ``voters`` sessions, or from one session when ``ip_hash`` is empty."""
    ids = []
    for i in range(n):
        vote = make_vote(winner_model, loser_model, "model_a")
        Vote.objects.filter(pk=vote.pk).update(ip_hash=ip_hash, voter_id=f"rigger-{i % voters}")
        ids.append(vote.pk)
    return ids


def votes_on(model):
    return (
        Vote.objects.filter(battle__model_a=model).count()
        + Vote.objects.filter(battle__model_b=model).count()
    )


def rating(snapshot, slug):
    overall = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")
    return next(m for m in overall["results"]["off"]["models"] if m["model"] == slug)["rating"]


def test_one_address_counts_at_most_its_share_of_a_models_votes(rated_models, make_vote, settings):
    alpha, _, gamma = rated_models
    others = votes_on(gamma)
    assert others * 0.15 < 20  # the floor applies: 20 of the 60 count
    rigged = cast(make_vote, gamma, alpha, 60, ip_hash="a" * 64, voters=6)

    capped = services.snapshot_refresh().snapshot
    rated = set(vote_sources.rating_battles()["vote_id"])
    settings.RATINGS_SOURCE_MAX_SHARE = 0
    uncapped = services.snapshot_refresh().snapshot

    # Six sessions of one address are one source: 20 of its votes count, the first by id.
    assert rated & set(rigged) == set(sorted(rigged)[:20])
    assert capped.n_votes == 60 + 20 and uncapped.n_votes == 60 + 60
    assert capped.payload["excluded"]["source_cap"] == {
        "votes": 40,
        "sources": 1,
        "min_votes": 20,
        "share": 0.15,
    }
    assert rating(capped, "gamma") < rating(uncapped, "gamma") - 50
    assert capped.params["source_max_share"] == 0.15 and capped.params["source_min_votes"] == 20


def test_the_bound_grows_with_the_models_votes_from_other_sources(
    rated_models, make_vote, settings
):
    alpha, _, gamma = rated_models
    settings.RATINGS_SOURCE_MIN_VOTES = 1
    others = min(votes_on(gamma), votes_on(alpha))
    rigged = cast(make_vote, gamma, alpha, 30, ip_hash="b" * 64)

    services.snapshot_refresh()
    rated = set(vote_sources.rating_battles()["vote_id"])

    # The smaller of the two models' bounds binds.
    assert len(rated & set(rigged)) == int(0.15 * others) > 1


def test_sessions_without_an_address_are_each_their_own_source(rated_models, make_vote):
    alpha, _, gamma = rated_models
    rigged = cast(make_vote, gamma, alpha, 60, voters=3)  # 20 votes per session, no address

    snapshot = services.snapshot_refresh().snapshot

    assert set(vote_sources.rating_battles()["vote_id"]) >= set(rigged)
    assert snapshot.payload["excluded"]["source_cap"]["votes"] == 0


def test_flagged_votes_do_not_use_up_a_sources_bound(rated_models, make_vote):
    alpha, _, gamma = rated_models
    rigged = cast(make_vote, gamma, alpha, 30, ip_hash="c" * 64)
    Vote.objects.filter(pk__in=rigged[:10]).update(flagged=True, flags=["too_fast"])

    services.snapshot_refresh()

    assert set(vote_sources.rating_battles()["vote_id"]) & set(rigged) == set(rigged[10:])


@pytest.mark.postgres  # the streamed path is PostgreSQL's COPY
def test_both_refit_paths_leave_out_the_same_votes(rated_models, make_vote, settings, tmp_path):
    alpha, _, gamma = rated_models
    cast(make_vote, gamma, alpha, 60, ip_hash="d" * 64, voters=4)
    settings.RATINGS_CI = "sandwich"
    settings.RATINGS_STREAM_BATCH_ROWS = 40
    settings.RATINGS_SPILL_DIR = str(tmp_path)

    memory, streamed = refresh_both(settings)

    assert streamed.params["streamed"] is True
    assert streamed.n_votes == memory.n_votes == 60 + 20
    assert_same(memory.payload, streamed.payload)


def test_the_transparency_page_says_what_the_bound_left_out(client, rated_models, make_vote):
    alpha, _, gamma = rated_models
    cast(make_vote, gamma, alpha, 60, ip_hash="e" * 64)
    services.snapshot_refresh()

    html = client.get("/transparency").content.decode()

    shown = " ".join(html.split('data-testid="source-cap">', 1)[1].split("</p>")[0].split())
    assert shown.startswith("One source, many votes: 40 votes from 1 source were left out.")
    assert "at most 20 votes on a model, or 0.15 times" in shown


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RATINGS_SOURCE_MAX_SHARE", "-0.1"),
        ("RATINGS_SOURCE_MAX_SHARE", "11"),
        ("RATINGS_SOURCE_MIN_VOTES", "0"),
        ("ARENA_ENV_SOURCE_MIN_VOTES", "0"),
    ],
)
def test_a_bound_out_of_range_refuses_to_start_naming_it(name, value):
    settings_start_refusal(name, value)
