"""``rate_parquet`` (the batch-by-batch fit of a Parquet file) against ``rate`` in memory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ratings.engine import CannotRateError, EngineError, RatingResult, rate, rate_parquet
from ratings.engine.io import read_battles

from .test_engine_bt import battles, pair_propensity

#: "The same ratings": 1e-6 Elo points, on ratings, interval bounds and style coefficients.
ELO = 1e-6
DATA = Path(__file__).parent / "data" / "arena55k_subsets" / "v402_commit_beb49c1"


def write(df: pd.DataFrame, path: Path, row_group_size: int | None = None) -> Path:
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size)
    return path


def assert_same(streamed: RatingResult, memory: RatingResult) -> None:
    """Ratings, bounds and coefficients to 1e-6 Elo; everything else equal."""
    assert [m.model for m in streamed.models] == [m.model for m in memory.models]
    for s, m in zip(streamed.models, memory.models, strict=True):
        assert abs(s.rating - m.rating) < ELO
        assert abs(s.rating_lower - m.rating_lower) < ELO
        assert abs(s.rating_upper - m.rating_upper) < ELO
        assert (s.rank, s.votes) == (m.rank, m.votes)
    assert streamed.provisional == memory.provisional
    assert (streamed.n_battles, streamed.n_battles_input) == (
        memory.n_battles,
        memory.n_battles_input,
    )
    assert streamed.method.degenerate_style_elements == memory.method.degenerate_style_elements
    assert streamed.method.iterations == memory.method.iterations
    if memory.style_coefficients is None:
        assert streamed.style_coefficients is None
    else:
        assert streamed.style_coefficients is not None and streamed.style_intervals is not None
        assert memory.style_intervals is not None
        for name, value in memory.style_coefficients.items():
            other = streamed.style_coefficients[name]
            if value is None:
                assert other is None and streamed.style_intervals[name] is None
                continue
            assert other is not None
            assert abs(other - value) < 1e-9
            bounds, expected = streamed.style_intervals[name], memory.style_intervals[name]
            assert bounds is not None and expected is not None
            assert np.allclose(bounds, expected, rtol=0, atol=1e-9)
    assert streamed.matrices.battle_counts == memory.matrices.battle_counts
    assert streamed.matrices.win_fraction == memory.matrices.win_fraction
    assert np.allclose(
        streamed.matrices.predicted_win_probability,
        memory.matrices.predicted_win_probability,
        rtol=0,
        atol=1e-12,
    )
    assert streamed.online_elo is None
    assert streamed.method.position == memory.method.position
    assert streamed.method.inverse_propensity == memory.method.inverse_propensity
    if memory.position is None:
        assert streamed.position is None
    else:
        assert streamed.position is not None
        for field in ("coefficient", "standard_error", "lower", "upper"):
            value, other = getattr(memory.position, field), getattr(streamed.position, field)
            assert (value is None) == (other is None)
            if value is not None:
                assert abs(other - value) < 1e-9


@pytest.mark.parametrize("style_control", [True, False])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"reweight": True},
        {"style_l2": 0.01},
        {"anchor": ("m2", 1200.0)},
        {"position": True},
        {"propensity": True},
        {"position": True, "propensity": True, "style_l2": 0.01},
    ],
    ids=["plain", "reweight", "l2", "anchor", "position", "ipw", "position+ipw+l2"],
)
def test_streamed_fit_equals_the_in_memory_fit(tmp_path, style_control, options):
    df = battles(20_000, p=12, seed=3)
    if options.get("propensity"):
        options = {**options, "propensity": pair_propensity(df)}
    path = write(df, tmp_path / "b.parquet", row_group_size=3000)
    memory = rate(read_battles(path), style_control=style_control, **options)
    streamed = rate_parquet(path, style_control=style_control, batch_rows=2500, **options)
    assert_same(streamed, memory)


def test_the_batch_size_does_not_change_the_result(tmp_path):
    path = write(battles(5000, p=6, seed=4), tmp_path / "b.parquet")
    one = rate_parquet(path, style_control=True, batch_rows=10_000)
    many = rate_parquet(path, style_control=True, batch_rows=333)
    assert_same(many, one)
    assert_same(rate_parquet(path, style_control=True, batch_rows=333, workers=2), one)


def test_a_where_filter_rates_the_rows_it_keeps_as_rate_does_on_them(tmp_path):
    df = battles(8000, p=8, seed=5)
    df["category"] = np.where(np.arange(len(df)) % 3 == 0, "coding", "creative")
    path = write(df, tmp_path / "b.parquet", row_group_size=1000)
    # Rows outside the filter may be invalid: they are not read as battles.
    df.loc[df.category == "creative", "winner"] = "??"
    write(df, path, row_group_size=1000)
    kept = df[df.category == "coding"].drop(columns="category").reset_index(drop=True)
    memory = rate(kept, style_control=True)

    def coding(batch: pa.RecordBatch) -> np.ndarray:
        return np.asarray(pc.equal(batch.column("category"), "coding"))

    streamed = rate_parquet(path, style_control=True, where=coding, batch_rows=700)
    assert_same(streamed, memory)
    assert streamed.n_battles_input == len(kept)


def test_a_where_filter_sees_only_the_columns_asked_for(tmp_path):
    df = battles(500, p=4, seed=6)
    df["category"], df["language"] = "coding", "en"
    path = write(df, tmp_path / "b.parquet")
    seen: list[list[str]] = []

    def everything(batch: pa.RecordBatch) -> np.ndarray:
        seen.append(batch.schema.names)
        return np.ones(batch.num_rows, dtype=bool)

    rate_parquet(path, style_control=False, where=everything, where_columns=["language"])
    assert "language" in seen[0] and "category" not in seen[0]
    with pytest.raises(EngineError, match="where_columns: no column 'lang'"):
        rate_parquet(path, style_control=False, where=everything, where_columns=["lang"])


def test_a_where_filter_must_return_one_boolean_per_row(tmp_path):
    path = write(battles(500, p=4, seed=6), tmp_path / "b.parquet")
    with pytest.raises(EngineError, match="boolean array"):
        rate_parquet(path, style_control=False, where=lambda batch: np.ones(3, dtype=bool))


def test_provisional_models_are_split_off_as_rate_does(tmp_path):
    df = battles(6000, p=6, seed=7)
    # A newcomer that only wins, and a pair that only met each other: not rated.
    extra = pd.DataFrame(
        {
            "model_a": ["new"] * 3 + ["x", "y"],
            "model_b": ["m0", "m1", "m2", "y", "x"],
            "winner": ["model_a"] * 3 + ["model_a", "tie"],
        }
    )
    counts = df.drop(columns=["model_a", "model_b", "winner"]).iloc[:5].reset_index(drop=True)
    df = pd.concat([df, pd.concat([extra, counts], axis=1)], ignore_index=True)
    path = write(df, tmp_path / "b.parquet", row_group_size=2000)
    for style_control in (True, False):
        memory = rate(read_battles(path), style_control=style_control)
        assert {e.model for e in memory.provisional} == {"new", "x", "y"}
        # The file read in memory rates as the DataFrame does (the rows among rated models
        # keep no trace of the others).
        frame = rate(df, style_control=style_control)
        assert [m.rating for m in frame.models] == [m.rating for m in memory.models]
        assert_same(rate_parquet(path, style_control=style_control, batch_rows=1500), memory)


def test_cannot_rate_is_raised_with_the_same_provisional_entries(tmp_path):
    df = pd.DataFrame(
        {"model_a": ["a", "a", "b"], "model_b": ["b", "c", "c"], "winner": ["model_a"] * 3}
    )
    path = write(df, tmp_path / "b.parquet")
    with pytest.raises(CannotRateError) as memory:
        rate(read_battles(path), style_control=False)
    with pytest.raises(CannotRateError) as streamed:
        rate_parquet(path, style_control=False)
    assert str(streamed.value) == str(memory.value)
    assert streamed.value.provisional == memory.value.provisional


def test_no_battles_after_the_filter_cannot_be_rated(tmp_path):
    path = write(battles(300, p=4), tmp_path / "b.parquet")
    with pytest.raises(CannotRateError, match="no battles to rate"):
        rate_parquet(path, style_control=True, where=lambda b: np.zeros(b.num_rows, dtype=bool))


def test_style_elements_that_never_vary_or_follow_the_models_are_dropped_as_rate_does(
    tmp_path,
):
    df = battles(2000, p=5, seed=8)
    df["header_count_a"] = df["header_count_b"] = 0  # never varies
    df["list_count_a"] = df["sum_assistant_a_tokens"]  # the same difference as length
    df["list_count_b"] = df["sum_assistant_b_tokens"]
    # Bold follows the models: m0 always answers with 3, everyone else with none ...
    df["bold_count_a"] = np.where(df.model_a == "m0", 3, 0)
    df["bold_count_b"] = np.where(df.model_b == "m0", 3, 0)
    # ... and every battle is also played with the sides swapped, so the differences have
    # mean 0 and bold's is a model contrast exactly.
    swap = {"model_a": "model_b", "sum_assistant_a_tokens": "sum_assistant_b_tokens"}
    swap |= {f"{e}_count_a": f"{e}_count_b" for e in ("header", "list", "bold")}
    mirror = df.rename(columns=swap | {b: a for a, b in swap.items()})
    mirror["winner"] = df.winner.replace({"model_a": "model_b", "model_b": "model_a"})
    df = pd.concat([df, mirror[df.columns]], ignore_index=True)
    path = write(df, tmp_path / "b.parquet", row_group_size=900)
    memory = rate(read_battles(path), style_control=True)
    assert memory.method.degenerate_style_elements == ("header", "list", "bold")
    assert_same(rate_parquet(path, style_control=True, batch_rows=700), memory)


def test_conv_metadata_as_a_struct_or_as_json_text_reads_like_read_battles(tmp_path):
    df = battles(3000, p=5, seed=9)
    flat = df.copy()

    def meta(row: pd.Series) -> dict:
        def split(total: int, keys: list[str]) -> dict[str, int]:
            return {k: (int(total) if i == 0 else 0) for i, k in enumerate(keys)}

        out: dict = {}
        for side in ("a", "b"):
            out[f"sum_assistant_{side}_tokens"] = int(row[f"sum_assistant_{side}_tokens"])
            out[f"header_count_{side}"] = split(
                row[f"header_count_{side}"], [f"h{i}" for i in range(1, 7)]
            )
            out[f"list_count_{side}"] = split(row[f"list_count_{side}"], ["ordered", "unordered"])
            out[f"bold_count_{side}"] = split(row[f"bold_count_{side}"], ["**", "__"])
        return out

    records = [meta(row) for _, row in flat.iterrows()]
    base = df[["model_a", "model_b", "winner"]]
    as_struct = pa.Table.from_pandas(base, preserve_index=False).append_column(
        "conv_metadata", pa.array(records)
    )
    as_json = pa.Table.from_pandas(base, preserve_index=False).append_column(
        "conv_metadata", pa.array([json.dumps(r) for r in records])
    )
    memory = rate(flat, style_control=True)
    for name, table in (("struct", as_struct), ("json", as_json)):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path, row_group_size=1000)
        assert_same(rate_parquet(path, style_control=True, batch_rows=800), memory)


def test_the_real_arena55k_subset_rates_as_in_memory(tmp_path):
    raw = pd.read_csv(DATA / "train_subset.csv")
    winner = np.select(
        [raw.winner_model_a == 1, raw.winner_model_b == 1], ["model_a", "model_b"], "tie"
    )
    df = pd.DataFrame({"model_a": raw.model_a, "model_b": raw.model_b, "winner": winner})
    path = write(df, tmp_path / "arena.parquet")
    memory = rate(read_battles(path), style_control=False)
    assert_same(rate_parquet(path, style_control=False, batch_rows=100), memory)


def test_bootstrap_is_refused_as_in_memory_only(tmp_path):
    path = write(battles(300, p=4), tmp_path / "b.parquet")
    with pytest.raises(EngineError, match="bootstrap intervals need every battle in memory"):
        rate_parquet(path, style_control=True, ci="bootstrap")  # type: ignore[arg-type]


def test_ci_none_gives_the_ratings_without_intervals(tmp_path):
    path = write(battles(2000, p=5), tmp_path / "b.parquet")
    result = rate_parquet(path, style_control=True, ci="none")
    memory = rate(read_battles(path), style_control=True)
    for s, m in zip(result.models, memory.models, strict=True):
        assert abs(s.rating - m.rating) < ELO and s.rating_lower == s.rating_upper == s.rating


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"winner": "draw"}, "row 1502: winner 'draw' is not one of"),
        ({"model_b": None}, "row 1502: model_b is empty"),
        ({"header_count_a": -1}, "row 1502: header_count_a must be a non-negative count"),
    ],
)
def test_a_bad_row_is_named_by_its_file_row_as_read_battles_does(tmp_path, change, message):
    df = battles(3000, p=5).astype({"header_count_a": "int64"})
    for column, value in change.items():
        df[column] = df[column].astype(object)
        df.loc[1501, column] = value
    path = write(df, tmp_path / "b.parquet", row_group_size=1000)
    with pytest.raises(EngineError, match=message):
        rate(read_battles(path), style_control=True)
    with pytest.raises(EngineError, match=message):
        rate_parquet(path, style_control=True, batch_rows=700)


def test_style_control_without_style_counts_is_refused(tmp_path):
    path = write(battles(300, p=4, style=False), tmp_path / "b.parquet")
    with pytest.raises(EngineError, match="missing column 'sum_assistant_a_tokens'"):
        rate_parquet(path, style_control=True)
    with pytest.raises(EngineError, match="no such file"):
        rate_parquet(tmp_path / "absent.parquet", style_control=True)


def test_the_command_line_streamed_prints_what_it_prints_in_memory(tmp_path):
    from ratings.cli import main

    path = write(battles(3000, p=5, seed=10), tmp_path / "b.parquet", row_group_size=1000)
    outputs = {}
    for name, extra in (("memory", []), ("streamed", ["--streamed"])):
        out = tmp_path / f"{name}.json"
        assert main([str(path), "--format", "json", "--output", str(out), *extra]) == 0
        outputs[name] = json.loads(out.read_text())
    memory, streamed = outputs["memory"], outputs["streamed"]
    assert [m["model"] for m in streamed["models"]] == [m["model"] for m in memory["models"]]
    for s, m in zip(streamed["models"], memory["models"], strict=True):
        assert abs(s["rating_upper"] - m["rating_upper"]) < ELO


def test_the_command_line_streamed_refuses_the_bootstrap_and_other_formats(tmp_path, capsys):
    from ratings.cli import main

    path = write(battles(300, p=4), tmp_path / "b.parquet")
    assert main([str(path), "--streamed", "--ci", "bootstrap"]) == 1
    assert "the bootstrap needs the battles in memory" in capsys.readouterr().err
    csv = tmp_path / "b.csv"
    battles(300, p=4).to_csv(csv, index=False)
    assert main([str(csv), "--streamed"]) == 1
    assert "--streamed reads Parquet files only" in capsys.readouterr().err


def test_style_control_with_no_style_variation_at_all_rates_as_rate_does(tmp_path):
    df = battles(2000, p=5, seed=11)
    for column in df.columns[3:]:
        df[column] = 7
    path = write(df, tmp_path / "b.parquet")
    memory = rate(read_battles(path), style_control=True)
    assert memory.method.degenerate_style_elements == ("length", "header", "list", "bold")
    assert_same(rate_parquet(path, style_control=True, batch_rows=300), memory)


def test_models_that_first_appear_in_later_batches_are_rated_as_rate_does(tmp_path):
    # Sixty models, sorted so that batch after batch brings new names (and new pairs).
    df = battles(12_000, p=60, seed=12)
    df = df.iloc[np.argsort(df.model_a.str[1:].astype(int), kind="stable")]
    path = write(df.reset_index(drop=True), tmp_path / "b.parquet", row_group_size=1500)
    for style_control in (True, False):
        memory = rate(read_battles(path), style_control=style_control)
        assert_same(rate_parquet(path, style_control=style_control, batch_rows=700), memory)


def test_a_file_that_is_not_parquet_is_one_clear_error(tmp_path):
    path = tmp_path / "b.parquet"
    path.write_bytes(b"model_a,model_b,winner\nx,y,tie\n")
    with pytest.raises(EngineError, match="b.parquet: cannot read it"):
        rate_parquet(path, style_control=False)
    good = write(battles(3000, p=5), tmp_path / "good.parquet", row_group_size=1000)
    data = good.read_bytes()
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(data[: len(data) // 2] + data[-8:])  # footer kept, pages cut
    with pytest.raises(EngineError, match="truncated.parquet: cannot read it"):
        rate_parquet(truncated, style_control=True)
