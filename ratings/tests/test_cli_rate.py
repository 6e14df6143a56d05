"""``manage.py rate``: file formats, output formats and errors that name the row or column."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pandas as pd
import pytest
from django.core.management import CommandError, call_command

from ratings import cli
from ratings.engine import STYLE_COLUMNS, EngineError

FLAT = [column for pair in STYLE_COLUMNS.values() for column in pair]


def nested(row: pd.Series) -> dict:
    """A conv_metadata object whose nested counts sum to the row's flat counts."""

    def split(total: int, keys: list[str]) -> dict:
        parts = dict.fromkeys(keys, 0)
        parts[keys[0]] = int(total) - int(total) // 2
        parts[keys[-1]] += int(total) // 2
        return parts

    headers = ["h1", "h2", "h3", "h4", "h5", "h6"]
    return {
        "sum_assistant_a_tokens": int(row.sum_assistant_a_tokens),
        "sum_assistant_b_tokens": int(row.sum_assistant_b_tokens),
        "header_count_a": split(row.header_count_a, headers),
        "header_count_b": split(row.header_count_b, headers),
        "list_count_a": split(row.list_count_a, ["ordered", "unordered"]),
        "list_count_b": split(row.list_count_b, ["ordered", "unordered"]),
        "bold_count_a": split(row.bold_count_a, ["**", "__"]),
        "bold_count_b": split(row.bold_count_b, ["**", "__"]),
    }


@pytest.fixture(scope="module")
def flat_battles() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n, models = 240, ["alpha", "beta", "gamma", "delta"]
    a = rng.integers(0, 4, n)
    b = (a + rng.integers(1, 4, n)) % 4
    df = pd.DataFrame(
        {
            "model_a": [models[i] for i in a],
            "model_b": [models[i] for i in b],
            "winner": rng.choice(["model_a", "model_b", "tie", "tie (bothbad)"], n),
        }
    )
    df["sum_assistant_a_tokens"] = rng.integers(20, 900, n)
    df["sum_assistant_b_tokens"] = rng.integers(20, 900, n)
    for column in FLAT[2:]:
        df[column] = rng.integers(0, 7, n)
    return df


def call(*args: str) -> str:
    out = io.StringIO()
    call_command("rate", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_json_output_has_the_documented_shape(tmp_path, flat_battles):
    path = tmp_path / "battles.jsonl"
    flat_battles.to_json(path, orient="records", lines=True)
    result = json.loads(call(str(path), "--format", "json"))
    assert set(result) >= {"models", "style_coefficients", "n_battles", "method"}
    assert result["n_battles"] == len(flat_battles)
    assert set(result["style_coefficients"]) == {"length", "header", "list", "bold"}
    assert set(result["models"][0]) == {
        "model",
        "rating",
        "rating_lower",
        "rating_upper",
        "rank",
        "votes",
        "preliminary",
        "rank_worst",
        "tier",
    }
    assert sorted(m["model"] for m in result["models"]) == ["alpha", "beta", "delta", "gamma"]


def test_csv_output_lists_every_model_with_its_interval(tmp_path, flat_battles):
    path = tmp_path / "battles.csv"
    flat_battles.to_csv(path, index=False)
    rows = list(csv.DictReader(io.StringIO(call(str(path), "--format", "csv"))))
    assert [r["model"] for r in rows] == [m["model"] for m in json.loads(call(str(path)))["models"]]
    for row in rows:
        assert float(row["rating_lower"]) < float(row["rating"]) < float(row["rating_upper"])
        assert int(row["rank"]) <= int(row["rank_worst"]) <= len(rows)
    assert rows[0]["tier"] == "1"


def test_table_output_shows_ranks_ratings_and_style_coefficients(tmp_path, flat_battles):
    path = tmp_path / "battles.csv"
    flat_battles.to_csv(path, index=False)
    text = call(str(path), "--format", "table")
    assert "rank" in text.splitlines()[0] and "95% interval" in text
    assert "style coefficients" in text and "length" in text
    assert all(name in text for name in ("alpha", "beta", "gamma", "delta"))


def test_conv_metadata_and_flat_columns_give_identical_results(tmp_path, flat_battles):
    flat_path = tmp_path / "flat.json"
    flat_battles.to_json(flat_path, orient="records")
    nested_df = flat_battles[["model_a", "model_b", "winner"]].copy()
    nested_df["conv_metadata"] = [nested(row) for _, row in flat_battles.iterrows()]
    nested_path = tmp_path / "nested.jsonl"
    nested_df.to_json(nested_path, orient="records", lines=True)
    assert json.loads(call(str(flat_path))) == json.loads(call(str(nested_path)))


def test_parquet_with_a_struct_conv_metadata_reads_like_the_flat_file(tmp_path, flat_battles):
    nested_df = flat_battles[["model_a", "model_b", "winner"]].copy()
    nested_df["conv_metadata"] = [nested(row) for _, row in flat_battles.iterrows()]
    parquet = tmp_path / "battles.parquet"
    nested_df.to_parquet(parquet)
    csv_path = tmp_path / "battles.csv"
    flat_battles.to_csv(csv_path, index=False)
    assert json.loads(call(str(parquet))) == json.loads(call(str(csv_path)))


def test_bad_winner_fails_with_the_1_based_row_named(tmp_path, flat_battles):
    df = flat_battles.copy()
    df.loc[17, "winner"] = "model_c"  # the 18th battle
    path = tmp_path / "battles.csv"
    df.to_csv(path, index=False)
    with pytest.raises(CommandError, match=r"row 18: winner 'model_c'"):
        call(str(path))


def test_missing_column_fails_with_the_column_named(tmp_path, flat_battles):
    path = tmp_path / "battles.csv"
    flat_battles.drop(columns=["model_b"]).to_csv(path, index=False)
    with pytest.raises(CommandError, match="model_b"):
        call(str(path))


def test_style_control_without_style_counts_fails_unless_turned_off(tmp_path, flat_battles):
    path = tmp_path / "battles.csv"
    flat_battles[["model_a", "model_b", "winner"]].to_csv(path, index=False)
    with pytest.raises(CommandError, match="no-style-control"):
        call(str(path))
    result = json.loads(call(str(path), "--no-style-control"))
    assert result["style_coefficients"] is None
    assert result["method"]["style_control"] is False


def test_bootstrap_options_and_anchor_reach_the_engine(tmp_path, flat_battles):
    path = tmp_path / "battles.csv"
    flat_battles.to_csv(path, index=False)
    out = tmp_path / "out.json"
    args = ["--ci", "bootstrap", "--rounds", "20", "--seed", "5", "--anchor", "alpha=1100"]
    call(str(path), *args, "--output", str(out))
    result = json.loads(out.read_text())
    assert result["method"]["ci"] == "bootstrap"
    assert result["method"]["rounds"] == 20 and result["method"]["seed"] == 5
    alpha = next(m for m in result["models"] if m["model"] == "alpha")
    assert alpha["rating"] == 1100.0


def test_a_malformed_anchor_is_refused():
    with pytest.raises(EngineError, match="MODEL=RATING"):
        cli.parse_anchor("alpha:1100")


def test_command_line_module_exits_non_zero_on_bad_input(tmp_path, flat_battles, capsys):
    df = flat_battles.copy()
    df.loc[3, "winner"] = "?"
    path = tmp_path / "battles.csv"
    df.to_csv(path, index=False)
    assert cli.main([str(path)]) == 1
    assert "row 4: winner '?'" in capsys.readouterr().err


def test_parquet_with_flat_count_columns_reads_like_the_csv_file(tmp_path, flat_battles):
    parquet = tmp_path / "battles.parquet"
    flat_battles.to_parquet(parquet)
    csv_path = tmp_path / "battles.csv"
    flat_battles.to_csv(csv_path, index=False)
    assert json.loads(call(str(parquet))) == json.loads(call(str(csv_path)))


def test_parquet_with_an_empty_model_name_names_the_row(tmp_path, flat_battles):
    df = flat_battles.copy()
    df.loc[5, "model_a"] = None  # the 6th battle
    parquet = tmp_path / "battles.parquet"
    df.to_parquet(parquet)
    with pytest.raises(CommandError, match=r"row 6: model_a"):
        call(str(parquet))


def split_battles(flat_battles: pd.DataFrame) -> pd.DataFrame:
    """``flat_battles`` plus a newcomer that won its 3 battles and two models that met only
    each other."""
    extra = pd.DataFrame(
        {
            "model_a": ["newbie", "alpha", "newbie", "live-1", "live-2", "live-1"],
            "model_b": ["beta", "newbie", "gamma", "live-2", "live-1", "live-2"],
            "winner": ["model_a", "model_b", "model_a", "model_a", "model_a", "tie"],
        }
    )
    for column in FLAT:
        extra[column] = [3, 5, 7, 2, 4, 6]
    return pd.concat([flat_battles, extra], ignore_index=True)


def test_json_output_adds_the_provisional_models_and_keeps_its_schema(tmp_path, flat_battles):
    path = tmp_path / "battles.jsonl"
    split_battles(flat_battles).to_json(path, orient="records", lines=True)

    result = json.loads(call(str(path), "--format", "json"))

    assert sorted(m["model"] for m in result["models"]) == ["alpha", "beta", "delta", "gamma"]
    assert set(result["models"][0]) == {
        "model",
        "rating",
        "rating_lower",
        "rating_upper",
        "rank",
        "votes",
        "preliminary",
        "rank_worst",
        "tier",
    }
    assert result["provisional"] == [
        {
            "model": "live-1",
            "battles": 3,
            "wins": 1,
            "losses": 1,
            "ties": 1,
            "reason": "not_connected",
        },
        {
            "model": "live-2",
            "battles": 3,
            "wins": 1,
            "losses": 1,
            "ties": 1,
            "reason": "not_connected",
        },
        {"model": "newbie", "battles": 3, "wins": 3, "losses": 0, "ties": 0, "reason": "no_losses"},
    ]
    assert result["n_battles"] == len(flat_battles)
    assert result["n_battles_input"] == len(flat_battles) + 6


def test_command_line_exits_0_with_provisional_models(tmp_path, flat_battles, capsys):
    path = tmp_path / "battles.csv"
    split_battles(flat_battles).to_csv(path, index=False)

    assert cli.main([str(path), "--format", "csv"]) == 0

    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["status"] for r in rows] == ["rated"] * 4 + ["provisional"] * 3
    newbie = rows[-1]
    assert (newbie["model"], newbie["wins"], newbie["reason"]) == ("newbie", "3", "no_losses")
    assert newbie["rating"] == ""


def test_table_output_lists_provisional_models_below_the_ratings(tmp_path, flat_battles):
    path = tmp_path / "battles.csv"
    split_battles(flat_battles).to_csv(path, index=False)

    text = call(str(path), "--format", "table")

    ratings, _, below = text.partition("provisional (needs more battles")
    assert "alpha" in ratings and "newbie" not in ratings
    assert "newbie" in below and "no_losses" in below and "not_connected" in below


def test_no_ratable_models_exit_non_zero_with_one_line_naming_the_reason(tmp_path, capsys):
    path = tmp_path / "battles.jsonl"
    path.write_text(
        '{"model_a": "a", "model_b": "b", "winner": "model_a"}\n' * 3,
        encoding="utf-8",
    )

    assert cli.main([str(path), "--no-style-control"]) == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: no two models can be rated")
    assert "no_losses: a" in lines[0] and "no_wins: b" in lines[0]


def test_malformed_jsonl_names_its_1_based_line_in_one_line(tmp_path, capsys):
    path = tmp_path / "battles.jsonl"
    good = '{"model_a": "a", "model_b": "b", "winner": "model_a"}'
    path.write_text(f'{good}\n{good}\n{{"model_a": "a",\n{good}\n', encoding="utf-8")

    assert cli.main([str(path), "--no-style-control"]) == 1

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {path}: line 3: not valid JSON")


def test_a_file_that_is_not_parquet_fails_in_one_line(tmp_path):
    path = tmp_path / "battles.parquet"
    path.write_text("not parquet", encoding="utf-8")
    with pytest.raises(CommandError, match="cannot read it"):
        call(str(path))


def test_dash_reads_json_lines_from_standard_input(tmp_path, flat_battles, monkeypatch):
    data = split_battles(flat_battles).to_json(orient="records", lines=True)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.encode())))

    result = json.loads(call("-"))

    assert len(result["models"]) == 4 and len(result["provisional"]) == 3


def test_progress_bar_is_drawn_only_on_a_terminal(tmp_path, flat_battles, capsys):
    path = tmp_path / "battles.csv"
    flat_battles.to_csv(path, index=False)

    assert cli.main([str(path), "--ci", "bootstrap", "--rounds", "3"]) == 0

    assert capsys.readouterr().err == ""  # capsys' stderr is not a terminal


def test_csv_cells_that_start_a_formula_are_neutralised(tmp_path, flat_battles, capsys):
    df = flat_battles.replace({"alpha": "=HYPERLINK(1)", "beta": "@SUM(A1)"})
    path = tmp_path / "battles.csv"
    df.to_csv(path, index=False)

    assert cli.main([str(path), "--format", "csv"]) == 0

    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {"'=HYPERLINK(1)", "'@SUM(A1)"} <= {r["model"] for r in rows}
