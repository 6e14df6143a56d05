"""bench/battles.py's own logic: its percentiles, its statement counts from PostgreSQL's log, and
its challenge solver, whose payload the server's verifier must accept (else every visitor of
the benchmark would fail to sign up and the run would measure nothing)."""

from pathlib import Path

import numpy as np
import pytest

from arena.errors import ArenaError
from arena.services.vote_guards import challenge_create, challenge_verify
from bench.battles import count_statements, percentile, solve_challenge, statement_kind


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
