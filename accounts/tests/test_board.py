"""The personal board's fit: a regularised Bradley-Terry fit by Hunter's MM updates, checked
against its own optimality conditions and against what its prior promises."""

import math
import random

import pytest

from accounts.board import ELO_CENTRE, Game, board_fit


def strengths(board) -> dict[str, float]:
    return {row.model: 10 ** ((row.rating - ELO_CENTRE) / 400) for row in board.rows}


def test_no_game_is_an_empty_board():
    board = board_fit([])
    assert board.rows == [] and board.games == 0 and board.converged


def test_one_win_puts_the_winner_first_with_finite_ratings_either_side_of_the_average():
    board = board_fit([Game("a", "b", "model_a")])
    (first, second) = board.rows
    assert (first.model, first.rank, second.model, second.rank) == ("a", 1, "b", 2)
    assert math.isfinite(first.rating) and math.isfinite(second.rating)
    assert first.rating > ELO_CENTRE > second.rating
    # The pair is symmetric: as far above the average as the loser is below it.
    assert first.rating - ELO_CENTRE == pytest.approx(ELO_CENTRE - second.rating)
    assert (first.wins, first.ties, first.losses) == (1, 0, 0)
    assert (second.wins, second.ties, second.losses) == (0, 0, 1)


def test_more_wins_move_the_ratings_further_apart():
    one = board_fit([Game("a", "b", "model_a")]).rows[0].rating
    ten = board_fit([Game("a", "b", "model_a")] * 10).rows[0].rating
    assert ten > one


def test_ties_and_both_bad_are_half_a_win_each_so_equal_models_share_a_rank():
    board = board_fit([Game("a", "b", "tie"), Game("b", "a", "tie (bothbad)")])
    assert [row.rank for row in board.rows] == [1, 1]
    assert [row.rating for row in board.rows] == [pytest.approx(ELO_CENTRE)] * 2
    assert all((row.ties, row.games) == (2, 2) for row in board.rows)


def test_a_game_of_a_model_against_itself_counts_for_nothing():
    board = board_fit([Game("a", "a", "model_a"), Game("a", "b", "model_b")])
    assert board.games == 1
    assert [row.model for row in board.rows] == ["b", "a"]


def test_the_fit_satisfies_the_penalised_likelihoods_score_equations():
    # At the optimum each model's (half-)wins plus its virtual win equal its expected wins
    # against the models it met and the average model (the MM update's fixed point).
    rng = random.Random(3)
    truth = {"a": 2.0, "b": 1.0, "c": 0.5, "d": 0.25}
    games = []
    for _ in range(300):
        x, y = rng.sample(sorted(truth), 2)
        roll = rng.random()
        p = truth[x] / (truth[x] + truth[y])
        games.append(
            Game(x, y, "tie" if roll > 0.9 else "model_a" if roll < p * 0.9 else "model_b")
        )
    board = board_fit(games)
    assert board.converged
    p = strengths(board)
    for model in truth:
        won = sum(
            1.0 if (g.winner == "model_a") == (g.model_a == model) else 0.0
            for g in games
            if model in (g.model_a, g.model_b) and g.winner in ("model_a", "model_b")
        )
        won += 0.5 * sum(
            1 for g in games if model in (g.model_a, g.model_b) and g.winner.startswith("tie")
        )
        expected = sum(
            p[model] / (p[model] + p[g.model_b if g.model_a == model else g.model_a])
            for g in games
            if model in (g.model_a, g.model_b)
        )
        expected += 2 * p[model] / (p[model] + 1)
        assert won + 1 == pytest.approx(expected, rel=1e-7)
    # ...and with that many votes it finds the order the votes were drawn from.
    assert [row.model for row in board.rows] == ["a", "b", "c", "d"]


def test_the_record_counts_each_models_wins_ties_and_losses():
    games = [Game("a", "b", "model_a"), Game("b", "c", "tie"), Game("c", "a", "model_a")]
    record = {row.model: (row.wins, row.ties, row.losses) for row in board_fit(games).rows}
    assert record == {"a": (1, 0, 1), "b": (0, 1, 1), "c": (1, 1, 0)}
