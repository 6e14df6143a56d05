"""The streamed snapshot refresh: past ``RATINGS_STREAM_THRESHOLD`` votes the refit writes them
to Parquet through one streamed COPY and fits each view from the file a batch at a time."""

import math
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.db import connection, transaction

from arena.models import Battle, Vote
from arena.selectors import votes_for_rating
from ratings import engine, services, tasks, vote_sources
from ratings.models import LeaderboardSnapshot

pytestmark = pytest.mark.postgres  # the Parquet path is PostgreSQL's COPY

BATCH_ROWS = 40


@pytest.fixture(autouse=True)
def stream_settings(settings, tmp_path, monkeypatch):
    monkeypatch.setattr(vote_sources, "PARQUET_READ_ROWS", 25)  # several batches per pass
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_LONG_PROMPT_CHARS = 200
    settings.RATINGS_CI = "sandwich"
    settings.RATINGS_STREAM_BATCH_ROWS = BATCH_ROWS
    settings.RATINGS_SPILL_DIR = str(tmp_path / "spill")
    (tmp_path / "spill").mkdir()
    return settings


@pytest.fixture
def votes(rated_models, make_vote):
    """The 60 votes of ``rated_models`` plus coding (its code run), long, multi-turn and French
    battles, votes without style counts, and votes the leaderboard leaves out (named, flagged,
    environment)."""
    alpha, beta, gamma = rated_models
    pairs = [(alpha, beta, "model_a"), (beta, gamma, "model_a"), (gamma, alpha, "model_b")]
    for i in range(36):
        a, b, winner = pairs[i % 3]
        if i % 5 == 0:
            winner = "tie"
        kind = i % 3
        if kind == 0:
            make_vote(a, b, winner, category="coding", code_ran=True)
        elif kind == 1:
            # Long prompts with an image: the vision category's votes.
            make_vote(
                b, a, "model_b" if winner == "model_a" else winner, prompt="x" * 250, images=1
            )
        else:
            make_vote(a, b, winner, turns=2, language="en-GB")
    # Coding by a fenced code block rather than by the prompt's category.
    for winner in ("model_a", "model_b", "tie"):
        make_vote(alpha, gamma, winner, prompt="Why?\n```py\nprint(1)\n```", code_ran=True)
    # French: alpha always beats beta, so no two models can be rated in that category.
    for _ in range(12):
        make_vote(alpha, beta, "model_a", language="fr-FR")
    # Votes without (complete) style counts: in every "off" view, in no "on" view.
    bare = [make_vote(beta, gamma, w).pk for w in ("model_a", "model_b", "tie") * 4]
    Vote.objects.filter(pk__in=bare[::2]).update(style={})
    Vote.objects.filter(pk__in=bare[1::2]).update(style={"sum_assistant_a_tokens": 3})
    # Left out: a named battle, a flagged vote, an environment battle.
    make_vote(gamma, alpha, "model_a", mode="named")
    make_vote(gamma, alpha, "model_a", flagged=True)
    env = make_vote(gamma, alpha, "model_a")
    Battle.objects.filter(pk=env.battle_id).update(source=Battle.Source.ENV)
    return rated_models


def rated_count():
    return votes_for_rating().count()


def assert_same(left, right, path="payload"):
    """Equal structures, floats within 1e-6; the streamed fit has no online Elo (None)."""
    if path.endswith(".online_elo"):
        assert right is None, (path, right)
    elif isinstance(left, float) and isinstance(right, float):
        assert math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-6), (path, left, right)
    elif isinstance(left, dict):
        assert isinstance(right, dict) and left.keys() == right.keys(), (path, left, right)
        for key in left:
            assert_same(left[key], right[key], f"{path}.{key}")
    elif isinstance(left, list | tuple):
        assert isinstance(right, list | tuple) and len(left) == len(right), (path, left, right)
        for i, (x, y) in enumerate(zip(left, right, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert left == right, (path, left, right)


def refresh_both(settings, masks=None):
    """An in-memory snapshot, then a streamed one of the same votes; ``masks`` collects the
    length of every row mask the streamed fits asked for."""
    settings.RATINGS_STREAM_THRESHOLD = 10**9
    memory = services.snapshot_refresh(force=True).snapshot
    settings.RATINGS_STREAM_THRESHOLD = 0
    real = engine.rate_parquet

    def rate_parquet(path, **kwargs):
        where = kwargs["where"]

        def counted(batch):
            keep = where(batch)
            if masks is not None:
                masks.append(len(keep))
            return keep

        return real(path, **{**kwargs, "where": counted})

    real_rate = engine.rate

    def audit_only(frame, **kwargs):
        # The streamed path fits from the file; only the fragility audit holds a view in memory.
        assert kwargs.get("fragility_top"), "fitted in memory"
        return real_rate(frame, **kwargs)

    with (
        mock.patch.object(engine, "rate", side_effect=audit_only),
        mock.patch.object(engine, "rate_parquet", side_effect=rate_parquet),
    ):
        streamed = services.snapshot_refresh(force=True).snapshot
    return memory, streamed


def category(snapshot, key):
    return next(c for c in snapshot.payload["categories"] if c["key"] == key)


def test_streamed_refresh_writes_the_same_payload_as_the_in_memory_one(votes, settings):
    masks = []
    memory, streamed = refresh_both(settings, masks)

    assert "streamed" not in memory.params and streamed.params["streamed"] is True
    assert streamed.params["ci"] == memory.params["ci"] == "sandwich"
    assert (streamed.n_votes, streamed.vote_high_water) == (memory.n_votes, memory.vote_high_water)
    assert streamed.n_votes == rated_count() == 60 + 36 + 3 + 12 + 12
    assert_same(memory.payload, streamed.payload)
    # The comparison covers every kind of view the fixture builds.
    keys = [c["key"] for c in streamed.payload["categories"]]
    assert keys == [
        "overall",
        "coding",
        "code-ran",
        "long_prompts",
        "multi_turn",
        "vision",
        "lang-en",
        "lang-fr",
    ]
    overall = category(streamed, "overall")
    assert overall["results"]["off"]["n_battles"] == 123
    assert overall["results"]["on"]["n_battles"] == 111  # the 12 without style counts left out
    assert category(streamed, "coding")["n_votes"] == 12 + 3
    assert category(streamed, "code-ran")["n_votes"] == 12 + 3
    assert category(streamed, "lang-fr")["status"] == "insufficient"
    assert streamed.payload["sampling"]["counts"] and streamed.payload["sampling"]["se"]
    # Every fit read the whole file in batches of at most PARQUET_READ_ROWS (25) rows.
    fits = 2 * len(keys)
    assert sum(masks) == 123 * fits and max(masks) == 25 and len(masks) >= 5 * fits


def test_streamed_refresh_with_position_and_propensity_weights_writes_the_in_memory_payload(
    votes, settings
):
    from arena.models import ArenaModel

    ArenaModel.objects.filter(pk=votes[0].pk).update(sampling_weight=5)
    settings.RATINGS_POSITION = True
    settings.RATINGS_INVERSE_PROPENSITY = True
    memory, streamed = refresh_both(settings)
    assert_same(memory.payload, streamed.payload)
    for style in ("on", "off"):
        result = category(streamed, "overall")["results"][style]
        assert result["method"]["position"] and result["method"]["inverse_propensity"]
        assert result["position"]["coefficient"] is not None
        assert result["position"]["standard_error"] > 0


def test_a_refresh_from_plain_style_counts_writes_the_in_memory_payload(votes, settings):
    # Without the votes holding one count and not the others the votes are read once.
    Vote.objects.filter(style={"sum_assistant_a_tokens": 3}).update(style={})
    with mock.patch.object(
        vote_sources, "_exact_counts", side_effect=AssertionError("read again")
    ) as exact:
        memory, streamed = refresh_both(settings)

    assert exact.call_count == 0
    assert streamed.params["streamed"] is True and streamed.n_votes == memory.n_votes == 123
    assert_same(memory.payload, streamed.payload)


def test_excluded_votes_stay_out_of_the_parquet_file(votes, tmp_path):
    with transaction.atomic():
        written = vote_sources.rating_battles_parquet(tmp_path / "v.parquet", batch_rows=BATCH_ROWS)
    table = pq.read_table(tmp_path / "v.parquet")

    rated = list(votes_for_rating().values_list("id", flat=True))
    assert table.column("vote_id").to_pylist() == rated
    assert written.rows == len(rated) and written.high_water == max(rated)
    excluded = Vote.objects.exclude(pk__in=rated)
    assert excluded.count() == 3  # named, flagged, environment


def write_and_compare(path, batch_rows=BATCH_ROWS, observe=None):
    """Write the votes to Parquet and check the file against ``rating_battles()`` row for row."""
    with transaction.atomic():
        written = vote_sources.rating_battles_parquet(
            path, batch_rows=batch_rows, observe=observe, restart=lambda: None
        )
    battles = vote_sources.rating_battles()
    frame = pq.read_table(path).to_pandas()

    assert written.rows == len(battles) == len(frame)
    for column in ("model_a", "model_b", "winner", "prompt_category", "language"):
        assert frame[column].astype(str).tolist() == battles[column].tolist()
    assert frame["prompt_has_image"].any() and not frame["prompt_has_image"].all()
    for column in (
        "vote_id",
        "turns",
        "prompt_chars",
        "prompt_has_code",
        "prompt_has_image",
        "code_ran",
    ):
        assert frame[column].tolist() == battles[column].tolist()
    complete = battles["conv_metadata"].map(vote_sources.style_complete)
    assert frame["style_complete"].tolist() == complete.tolist()
    flat = engine.flatten_conv_metadata(battles.loc[complete, ["conv_metadata"]])
    for column in vote_sources.PARQUET_STYLE_COLUMNS:
        assert frame.loc[complete.to_numpy(), column].tolist() == flat[column].tolist()
        assert (frame.loc[~complete.to_numpy(), column] == 0).all()
    # The engine reads the file as it is.
    read = engine.read_battles(path)
    assert len(read) == len(battles) and set(vote_sources.PARQUET_STYLE_COLUMNS) <= set(
        read.columns
    )
    return written


def test_the_parquet_file_matches_rating_battles_row_for_row(votes, tmp_path):
    written = write_and_compare(tmp_path / "v.parquet")

    assert written.rows == 123
    # Six votes hold one style count and not the others: read again with the JSON.
    assert written.exact


def test_plain_style_counts_are_written_from_their_parts(votes, tmp_path):
    Vote.objects.filter(style={"sum_assistant_a_tokens": 3}).update(style={})
    seen = []
    written = write_and_compare(tmp_path / "v.parquet", observe=lambda b: seen.append(b.num_rows))

    assert not written.exact and written.rows == 123
    assert seen == [BATCH_ROWS, BATCH_ROWS, BATCH_ROWS, 3]


def test_a_battle_without_prompt_is_written_with_empty_category_and_language(votes, tmp_path):
    Vote.objects.filter(style={"sum_assistant_a_tokens": 3}).update(style={})
    vote = Vote.objects.filter(battle__mode="anonymous", flagged=False).order_by("id").first()
    Battle.objects.filter(pk=vote.battle_id).update(prompt=None)

    written = write_and_compare(tmp_path / "v.parquet")
    frame = pq.read_table(tmp_path / "v.parquet").to_pandas().set_index("vote_id")

    assert not written.exact
    assert (frame.loc[vote.pk, "prompt_category"], frame.loc[vote.pk, "language"]) == ("", "")


@pytest.mark.parametrize(
    "style",
    [
        {"sum_assistant_a_tokens": "7"},  # a number as a string: int("7") in Python
        {"sum_assistant_b_tokens": True},
        {"header_count_b": {"h1": 2, "h2": 0, "h3": 0, "h4": 0, "h5": 0, "h6": 3, "h7": "x"}},
    ],
)
def test_style_counts_python_reads_differently_are_written_as_python_reads_them(
    votes, tmp_path, style
):
    Vote.objects.filter(style={"sum_assistant_a_tokens": 3}).update(style={})
    rated = votes_for_rating().exclude(style={}).values_list("id", flat=True)
    vote = Vote.objects.get(pk=list(rated)[-1])
    vote.style = {**vote.style, **style}
    vote.save(update_fields=["style"])

    written = write_and_compare(tmp_path / "v.parquet")

    # An extra part is ignored either way; a string or a boolean takes the exact path.
    assert written.exact == ("header_count_b" not in style)


@pytest.mark.parametrize(
    ("style", "key"),
    [
        ({"list_count_a": {"ordered": "1", "unordered": 0}}, "list_count_a"),
        ({"bold_count_b": {"**": 1}}, "bold_count_b"),
        ({"sum_assistant_a_tokens": None}, "sum_assistant_a_tokens"),
        ({"header_count_a": [1, 2]}, "header_count_a"),
    ],
)
def test_a_bad_style_count_fails_the_parquet_write_naming_it(votes, tmp_path, style, key):
    Vote.objects.filter(style={"sum_assistant_a_tokens": 3}).update(style={})
    rated = votes_for_rating().exclude(style={}).values_list("id", flat=True)
    vote = Vote.objects.get(pk=list(rated)[-1])
    vote.style = {**vote.style, **style}
    vote.save(update_fields=["style"])

    with transaction.atomic(), pytest.raises(engine.EngineError, match=f"conv_metadata.{key} "):
        vote_sources.rating_battles_parquet(tmp_path / "v.parquet", batch_rows=BATCH_ROWS)
    # The in-memory path refuses the same vote.
    battles = vote_sources.rating_battles()
    complete = battles["conv_metadata"].map(vote_sources.style_complete)
    with pytest.raises(engine.EngineError, match=f"conv_metadata.{key} "):
        engine.flatten_conv_metadata(battles.loc[complete, ["conv_metadata"]])


def test_the_parquet_file_is_one_row_group_per_batch_with_dictionary_encoded_models(
    votes, tmp_path
):
    path = tmp_path / "v.parquet"
    with transaction.atomic():
        written = vote_sources.rating_battles_parquet(path, batch_rows=BATCH_ROWS)
    parquet = pq.ParquetFile(path)

    assert written.row_groups == parquet.num_row_groups == math.ceil(123 / BATCH_ROWS) == 4
    sizes = [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)]
    assert sizes == [BATCH_ROWS, BATCH_ROWS, BATCH_ROWS, 3]
    for column in ("model_a", "model_b", "winner"):
        assert pa.types.is_dictionary(parquet.schema_arrow.field(column).type)


def test_the_parquet_write_holds_the_connection_only_while_it_runs(votes, tmp_path):
    with transaction.atomic():
        vote_sources.rating_battles_parquet(tmp_path / "v.parquet", batch_rows=25)
        # The COPY is over: the same transaction goes on.
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    assert pq.ParquetFile(tmp_path / "v.parquet").num_row_groups == 5


def test_a_batch_size_below_one_is_refused(db, tmp_path):
    with pytest.raises(ValueError, match="batch_rows must be at least 1"):
        vote_sources.rating_battles_parquet(tmp_path / "v.parquet", batch_rows=0)
    assert not (tmp_path / "v.parquet").exists()


def test_votes_read_again_show_every_vote_once_after_the_restart(votes, tmp_path):
    # Six votes hold one style count and not the others: the plain read gives up on them.
    seen = []
    with transaction.atomic():
        written = vote_sources.rating_battles_parquet(
            tmp_path / "v.parquet",
            batch_rows=BATCH_ROWS,
            observe=lambda batch: seen.extend(batch.column("vote_id").to_pylist()),
            restart=seen.clear,
        )
        with pytest.raises(ValueError, match="observe needs restart"):
            vote_sources.rating_battles_parquet(
                tmp_path / "w.parquet", batch_rows=BATCH_ROWS, observe=seen.append
            )

    assert written.exact
    assert seen == list(votes_for_rating().values_list("id", flat=True))


def test_the_parquet_file_is_deleted_after_the_refresh(votes, settings, tmp_path):
    settings.RATINGS_STREAM_THRESHOLD = 0
    with mock.patch.object(pq, "ParquetWriter", wraps=pq.ParquetWriter) as writer:
        snapshot = services.snapshot_refresh().snapshot

    written = writer.call_args.args[0]
    assert written.parent.parent == tmp_path / "spill"
    assert snapshot.params["streamed"] is True
    assert not written.exists() and list((tmp_path / "spill").iterdir()) == []


def test_a_failing_streamed_fit_deletes_the_parquet_file_and_writes_no_snapshot(
    votes, settings, tmp_path
):
    settings.RATINGS_STREAM_THRESHOLD = 0
    with (
        mock.patch.object(engine, "rate_parquet", side_effect=RuntimeError("boom")),
        pytest.raises(RuntimeError, match="boom"),
    ):
        services.snapshot_refresh()

    assert list((tmp_path / "spill").iterdir()) == []
    assert LeaderboardSnapshot.objects.count() == 0


def test_below_the_threshold_nothing_is_streamed(votes, settings):
    settings.RATINGS_STREAM_THRESHOLD = rated_count()  # "past" the threshold means more than it
    with mock.patch.object(engine, "rate_parquet", side_effect=AssertionError("streamed")):
        snapshot = services.snapshot_refresh().snapshot

    assert "streamed" not in snapshot.params
    assert snapshot.params == services.snapshot_params()


def test_a_streamed_snapshot_says_its_intervals_are_sandwich_when_bootstrap_was_asked(
    votes, settings, client
):
    settings.RATINGS_CI = "bootstrap"
    settings.RATINGS_STREAM_THRESHOLD = 0
    first = services.snapshot_refresh()
    second = services.snapshot_refresh()

    params = first.snapshot.params
    assert params["ci"] == "sandwich" and params["ci_requested"] == "bootstrap"
    assert params["rounds"] is None
    assert category(first.snapshot, "overall")["results"]["off"]["method"]["ci"] == "sandwich"
    # Its params are stable, so a rerun on the same votes is a no-op.
    assert not second.created and second.snapshot.pk == first.snapshot.pk
    assert "intervals: sandwich" in client.get("/leaderboard").content.decode()


@pytest.mark.parametrize("provisional", [True, False])
def test_a_view_the_engine_cannot_rate_is_listed_alike_on_both_paths(votes, settings, provisional):
    alpha, beta, _ = votes
    if provisional:
        record = engine.Provisional("alpha", 3, 3, 0, 0, "no_losses")
        error = engine.CannotRateError("fewer than two models", provisional=(record,))
    else:
        error = engine.CannotRateError("the style fit has no maximum")
    real_rate, real_rate_parquet = engine.rate, engine.rate_parquet

    def refuse_style(fit):
        def fake(*args, **kwargs):
            if kwargs["style_control"]:
                raise error
            return fit(*args, **kwargs)

        return fake

    settings.RATINGS_STREAM_THRESHOLD = 10**9
    with mock.patch.object(engine, "rate", side_effect=refuse_style(real_rate)):
        memory = services.snapshot_refresh(force=True).snapshot
    settings.RATINGS_STREAM_THRESHOLD = 0
    with mock.patch.object(engine, "rate_parquet", side_effect=refuse_style(real_rate_parquet)):
        streamed = services.snapshot_refresh(force=True).snapshot

    assert_same(memory.payload, streamed.payload)
    overall = category(streamed, "overall")
    assert overall["results"]["on"] is None and overall["results"]["off"] is not None
    listed = overall["provisional"]["on"]
    if provisional:
        assert listed == [
            {
                "model": "alpha",
                "battles": 3,
                "wins": 3,
                "losses": 0,
                "ties": 0,
                "reason": "no_losses",
            }
        ]
    else:
        # The exception's class is stored, its text only logged.
        assert overall["reasons"]["on"] == {"code": "fit_failed", "error": "CannotRateError"}
        assert {e["model"] for e in listed} == {"alpha", "beta", "gamma"}
        assert sum(e["battles"] for e in listed) == 2 * 111


def test_the_refresh_task_streams_past_the_threshold(votes, settings):
    settings.RATINGS_STREAM_THRESHOLD = 0
    first = tasks.snapshot_refresh.apply().get()
    second = tasks.snapshot_refresh.apply().get()

    assert first["created"] and not second["created"]
    snapshot = LeaderboardSnapshot.objects.get(pk=first["snapshot_id"])
    assert snapshot.params["streamed"] is True
    assert snapshot.n_votes == rated_count()
