"""Repeated visitors' prompts are down-sampled: each normalised live prompt counts at most
``RATINGS_DUPLICATE_PROMPT_CAP`` rated votes (the first by vote id), on both refit paths, and
the snapshot and /transparency say how many votes were left out."""

import pytest

from arena.models import USER_PROMPT_SOURCE, Battle, Prompt, Vote
from arena.prompt_text import prompt_text_hash
from arena.tests.cli import settings_start_refusal
from ratings import services, vote_sources
from ratings.tests.test_services_stream import assert_same, refresh_both

# 40 copies of one greeting as visitors type it: case, spacing and end punctuation differ.
GREETINGS = ["Hello!", "hello", "  HELLO ", "Hello?!", "hello\n"] * 8


@pytest.fixture(autouse=True)
def small_categories(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_DUPLICATE_PROMPT_CAP = 25


def live_vote(make_vote, model_a, model_b, winner, text, **kwargs):
    """A vote on a live battle over a visitor's prompt ``text``, stored as the live service does."""
    vote = make_vote(model_a, model_b, winner, prompt=text, **kwargs)
    battle = Battle.objects.get(pk=vote.battle_id)
    Prompt.objects.filter(pk=battle.prompt_id).update(
        source=USER_PROMPT_SOURCE, text_hash=prompt_text_hash(text)
    )
    Battle.objects.filter(pk=battle.pk).update(source=Battle.Source.LIVE)
    return vote


@pytest.fixture
def greetings(rated_models, make_vote):
    """The 60 pool votes of ``rated_models`` and 40 live votes on one greeting (alpha against
    beta, beta winning, so the copies past the cap would move the ratings); returns their ids."""
    alpha, beta, _ = rated_models
    return [live_vote(make_vote, alpha, beta, "model_b", text).pk for text in GREETINGS]


def overall_off(snapshot):
    overall = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")
    return overall["results"]["off"]


def test_a_prompt_typed_40_times_contributes_25_votes_to_the_fit(greetings):
    snapshot = services.snapshot_refresh().snapshot

    assert snapshot.n_votes == 60 + 25
    assert overall_off(snapshot)["n_battles"] == 60 + 25
    rated = set(vote_sources.rating_battles()["vote_id"])
    assert rated & set(greetings) == set(sorted(greetings)[:25])  # the first 25 by vote id
    assert snapshot.payload["excluded"]["duplicate_prompts"] == {
        "votes": 15,
        "prompts": 1,
        "cap": 25,
    }
    assert snapshot.params["duplicate_prompt_cap"] == 25


def test_copies_are_counted_among_the_rated_votes_only(greetings):
    # Flagged copies are left out already: they do not use up the prompt's 25.
    Vote.objects.filter(pk__in=greetings[:10]).update(flagged=True, flags=["too_fast"])

    snapshot = services.snapshot_refresh().snapshot

    assert snapshot.n_votes == 60 + 25
    rated = set(vote_sources.rating_battles()["vote_id"])
    assert rated & set(greetings) == set(sorted(greetings[10:])[:25])
    assert snapshot.payload["excluded"]["duplicate_prompts"]["votes"] == 5


def test_pool_prompts_repeated_past_the_cap_are_untouched(rated_models, make_vote):
    alpha, beta, _ = rated_models
    for _ in range(40):
        make_vote(alpha, beta, "model_b", prompt="Hello!")  # a curated prompt, no hash

    snapshot = services.snapshot_refresh().snapshot

    assert snapshot.n_votes == 60 + 40
    assert snapshot.payload["excluded"]["duplicate_prompts"] == {
        "votes": 0,
        "prompts": 0,
        "cap": 25,
    }


def test_distinct_live_prompts_each_keep_their_votes(rated_models, make_vote):
    alpha, beta, _ = rated_models
    for i in range(30):
        live_vote(make_vote, alpha, beta, "model_b", f"Question {i}")

    assert services.snapshot_refresh().snapshot.n_votes == 60 + 30


def test_cap_zero_rates_every_copy(greetings, settings):
    settings.RATINGS_DUPLICATE_PROMPT_CAP = 0

    snapshot = services.snapshot_refresh().snapshot

    assert snapshot.n_votes == 60 + 40
    assert snapshot.payload["excluded"]["duplicate_prompts"] == {
        "votes": 0,
        "prompts": 0,
        "cap": 0,
    }


def test_a_changed_cap_writes_a_new_snapshot(greetings, settings):
    first = services.snapshot_refresh().snapshot
    settings.RATINGS_DUPLICATE_PROMPT_CAP = 30

    again = services.snapshot_refresh()

    assert again.created and again.snapshot.pk != first.pk
    assert again.snapshot.n_votes == 60 + 30


@pytest.mark.postgres  # the streamed path is PostgreSQL's COPY
def test_both_refit_paths_leave_out_the_same_copies(greetings, settings, tmp_path):
    settings.RATINGS_CI = "sandwich"
    settings.RATINGS_STREAM_BATCH_ROWS = 40
    settings.RATINGS_SPILL_DIR = str(tmp_path)

    memory, streamed = refresh_both(settings)

    assert streamed.params["streamed"] is True and "streamed" not in memory.params
    assert streamed.n_votes == memory.n_votes == 60 + 25
    assert streamed.vote_high_water == memory.vote_high_water
    assert_same(memory.payload, streamed.payload)
    assert streamed.payload["excluded"]["duplicate_prompts"]["votes"] == 15


def test_the_transparency_page_shows_the_votes_left_out(client, greetings):
    services.snapshot_refresh()

    html = client.get("/transparency").content.decode()

    shown = " ".join(html.split('data-testid="duplicate-prompts">', 1)[1].split("</p>")[0].split())
    assert shown.startswith(
        "Duplicate prompts: 15 votes of 1 prompt repeated more than 25 times were left out "
        "(LMArena does the same)."
    )


def test_the_leaderboard_json_counts_the_votes_left_out(client, greetings):
    services.snapshot_refresh()

    body = client.get("/leaderboard.json").json()

    assert body["snapshot"]["excluded"]["duplicate_prompts"] == {
        "votes": 15,
        "prompts": 1,
        "cap": 25,
    }


@pytest.mark.parametrize("value", ["-1", "1000001"])
def test_a_cap_out_of_range_refuses_to_start_naming_it(value):
    settings_start_refusal("RATINGS_DUPLICATE_PROMPT_CAP", value)
