"""bench/battles.py's own logic: its percentiles, its statement counts from PostgreSQL's log, and
its challenge solver, whose payload the server's verifier must accept (else every visitor of
the benchmark would fail to sign up and the run would measure nothing)."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from arena.errors import ArenaError
from arena.services.vote_guards import challenge_create, challenge_verify
from bench.battles import count_statements, percentile, solve_challenge, statement_kind, table
from bench.shape import Tree


@pytest.mark.parametrize("q", [0, 25, 50, 90, 99, 100])
def test_percentile_interpolates_between_ranks_as_numpy_does(q):
    values = [12.0, 3.5, 7.25, 40.0, 1.0, 9.0, 15.5]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_is_nan():
    assert np.isnan(percentile([], 50))


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ('SELECT "arena_battle"."id" FROM "arena_battle" WHERE x = 1', "SELECT arena_battle"),
        ('INSERT INTO "arena_vote" ("battle_id") VALUES (1)', "INSERT arena_vote"),
        ('UPDATE "arena_battlemessage" SET "content" = 2', "UPDATE arena_battlemessage"),
        ("BEGIN", "BEGIN"),
        ("SELECT 1", "SELECT"),
    ],
)
def test_statement_kind_is_the_verb_and_the_first_table(sql, kind):
    assert statement_kind(sql) == kind


def test_count_statements_reads_only_the_bench_database_between_the_offsets(tmp_path: Path):
    before = "2026-11-30 23:00:00.000 UTC [1] postgres@bench_db LOG:  statement: SELECT 1\n"
    inside = (
        '2026-11-30 23:00:01.000 UTC [2] postgres@bench_db LOG:  statement: SELECT "a" FROM "t"\n'
        "2026-11-30 23:00:01.000 UTC [3] postgres@other_db LOG:  statement: SELECT 1\n"
        "2026-11-30 23:00:01.000 UTC [2] postgres@bench_db LOG:  execute <unnamed>: BEGIN\n"
        "\tcontinued line of a statement\n"
    )
    log = tmp_path / "postgresql.log"
    log.write_text(before + inside + before)
    start = len(before.encode())
    counted = count_statements(log, start, start + len(inside.encode()), "bench_db")
    assert counted == {"SELECT t": 1, "BEGIN": 1}


def test_the_benchmarks_challenge_solution_is_accepted_by_the_server(settings):
    settings.ARENA_CHALLENGE_MAX_NUMBER = 2000  # a small search: the protocol is the same
    challenge = challenge_create()
    payload = solve_challenge(dict(challenge))
    challenge_verify(payload=payload)  # raises ArenaError if refused
    with pytest.raises(ArenaError):  # the server's own check is live: a reuse is refused
        challenge_verify(payload=payload)


def _row(visitors: int, battles_per_s: float) -> dict:
    return {
        "visitors": visitors,
        "battles_per_s": battles_per_s,
        "ttft_p50": 10.0,
        "ttft_p99": 20.0,
        "overhead_p50": 30.0,
        "overhead_p99": 40.0,
        "vote_p50": 5.0,
        "vote_p99": 9.0,
        "errors": 0,
        "acknowledged": 7,
        "stored": 7,
        "web_cpu_ms": 25.0,
        "worker_cpu_ms": 0.1,
        "postgres_cpu_ms": 6.0,
        "redis_cpu_ms": 0.3,
        "client_cpu_ms": 2.0,
        "rss_mb": [260.0, 262.0],
        "connections": 0.0,
    }


def test_the_table_against_a_baseline_run_gives_each_levels_ratio_in_its_own_column():
    rows = [_row(10, 18.0), _row(50, 45.0)]
    baseline = [_row(10, 12.0)]  # no 50-visitor row: that level's ratio is "-"
    lines = table(rows, baseline).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[4] == "vs baseline, same run"
    assert lines[1].count("---:") == len(header)
    ten = [c.strip() for c in lines[2].strip("|").split("|")]
    fifty = [c.strip() for c in lines[3].strip("|").split("|")]
    assert len(ten) == len(fifty) == len(header)
    assert ten[4] == "1.50x"
    assert fifty[4] == "-"
    plain = table(rows).splitlines()
    assert "vs baseline" not in plain[0]
    assert len(plain[2].strip("|").split("|")) == len(header) - 1


def test_a_baseline_revision_is_resolved_before_anything_starts_and_a_bad_one_is_named():
    head = subprocess.run(
        ["git", "-C", str(Path(__file__).resolve().parent.parent), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Tree.resolve("HEAD") == head
    with pytest.raises(SystemExit, match="'no-such-revision' is not a commit"):
        Tree.resolve("no-such-revision")
