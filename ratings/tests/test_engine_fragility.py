"""The fragility audit against brute force on small arenas where the fewest votes is known."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from ratings.engine import STYLE_COLUMNS, CannotRateError, EngineError, rate

FLIP = {"model_a": "model_b", "model_b": "model_a"}


def record(wins: dict[tuple[str, str], tuple[int, int, int]]) -> pd.DataFrame:
    """Battles from ``(a, b) -> (a's wins, b's wins, ties)``, a always on side A."""
    rows = []
    for (a, b), (won, lost, tied) in wins.items():
        rows += [(a, b, "model_a")] * won + [(a, b, "model_b")] * lost + [(a, b, "tie")] * tied
    return pd.DataFrame(rows, columns=["model_a", "model_b", "winner"])


def swapped(df: pd.DataFrame, upper: str, lower: str, **options: object) -> bool:
    """Whether an independent fit of ``df`` rates ``lower`` above ``upper``."""
    try:
        result = rate(df, with_online_elo=False, **options)  # type: ignore[arg-type]
    except CannotRateError:
        return False
    rating = {m.model: m.rating for m in result.models}
    return upper in rating and lower in rating and rating[lower] > rating[upper]


def fewest(df: pd.DataFrame, upper: str, lower: str, kind: str, most: int, **options: object):
    """The fewest votes whose removal (or flip) swaps the pair, by trying every subset of each
    size up to ``most`` (identical votes are interchangeable: one subset per multiset)."""
    keys = list(df.itertuples(index=False, name=None))
    distinct = sorted(set(keys))
    for k in range(1, most + 1):
        for chosen in itertools.combinations_with_replacement(distinct, k):
            if any(chosen.count(key) > keys.count(key) for key in set(chosen)):
                continue
            if kind == "flip" and any(key[2] not in FLIP for key in chosen):
                continue
            changed = df.copy()
            for key in chosen:
                hit = changed.index[
                    (changed.model_a == key[0])
                    & (changed.model_b == key[1])
                    & (changed.winner == key[2])
                ][0]
                if kind == "removal":
                    changed = changed.drop(index=hit)
                else:
                    changed.loc[hit, "winner"] = FLIP[key[2]]
            if swapped(changed.reset_index(drop=True), upper, lower, **options):
                return k
    return None


THREE = record({("a", "b"): (7, 5, 2), ("a", "c"): (8, 4, 1), ("b", "c"): (9, 3, 1)})


def test_the_greedy_bounds_are_at_least_the_brute_force_minimum_and_swap_on_refit() -> None:
    result = rate(THREE, style_control=False, fragility_top=10, with_online_elo=False)
    audit = result.fragility
    assert audit is not None
    assert [m.model for m in result.models] == ["a", "b", "c"]
    top = audit.pairs[0]
    assert (top.upper, top.lower) == ("a", "b")
    for kind, bound in (("removal", top.removal), ("flip", top.flip)):
        assert bound is not None
        exact = fewest(THREE, "a", "b", kind, bound.votes, style_control=False)
        assert exact is not None
        assert bound.votes >= exact
        assert bound.exact == (bound.votes == 1)


def test_a_count_of_one_is_reported_as_exact() -> None:
    # a is ahead of b by a single decisive vote: flipping it (or removing it) swaps them.
    df = record({("a", "b"): (5, 4, 0), ("a", "c"): (5, 3, 0), ("b", "c"): (5, 3, 0)})
    audit = rate(df, style_control=False, fragility_top=10, with_online_elo=False).fragility
    assert audit is not None
    top = audit.pairs[0]
    assert (top.upper, top.lower) == ("a", "b")
    assert top.flip is not None and top.flip.votes == 1 and top.flip.exact
    assert fewest(df, "a", "b", "flip", 1, style_control=False) == 1


def test_the_bound_with_style_control_is_verified_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    n = 30
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(1, 3, n)) % 3
    names = np.array(["a", "b", "c"])
    z = np.array([0.3, 0.2, -0.5])[a] - np.array([0.3, 0.2, -0.5])[b]
    winner = np.where(rng.random(n) < 1 / (1 + np.exp(-z)), "model_a", "model_b")
    df = pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner})
    for high, columns in zip((400, 3, 4, 5), STYLE_COLUMNS.values(), strict=True):
        for column in columns:
            df[column] = rng.integers(0, high, n)
    result = rate(df, style_control=True, fragility_top=10, with_online_elo=False)
    audit = result.fragility
    assert audit is not None and audit.pairs
    top = audit.pairs[0]
    assert top.flip is not None
    # Each vote is distinct here (its own style counts), so this enumerates every subset.
    keyed = df
    exact = None
    for k in range(1, top.flip.votes + 1):
        for chosen in itertools.combinations(range(n), k):
            if any(keyed.winner[c] not in FLIP for c in chosen):
                continue
            changed = keyed.copy()
            for c in chosen:
                changed.loc[c, "winner"] = FLIP[keyed.winner[c]]
            if swapped(changed, top.upper, top.lower, style_control=True):
                exact = k
                break
        if exact is not None or k >= 2:
            break
    # Either the brute force found the minimum within two flips, or the minimum is above two.
    if exact is not None:
        assert top.flip.votes >= exact
    else:
        assert top.flip.votes > 2


def test_the_leader_is_audited_against_its_challengers() -> None:
    audit = rate(THREE, style_control=False, fragility_top=10, with_online_elo=False).fragility
    assert audit is not None
    assert audit.leader == "a"
    assert audit.leader_removal is not None
    assert audit.leader_removal.challenger in {"b", "c"}
    first = audit.pairs[0].removal
    assert first is not None
    assert audit.leader_removal.bound.votes <= first.votes


def test_only_established_models_among_those_given_are_audited() -> None:
    df = record(
        {
            ("a", "b"): (30, 25, 2),
            ("a", "c"): (30, 20, 1),
            ("b", "c"): (30, 22, 1),
            ("a", "d"): (2, 1, 0),
            ("d", "c"): (1, 1, 0),
        }
    )
    result = rate(
        df,
        style_control=False,
        fragility_top=10,
        fragility_among={"a", "c", "d"},
        established_min_votes=20,
        with_online_elo=False,
    )
    audit = result.fragility
    assert audit is not None
    assert [(p.upper, p.lower) for p in audit.pairs] == [("a", "c")]
    assert result.to_dict()["fragility"]["pairs"][0]["upper"] == "a"


def test_without_fragility_the_result_has_no_such_key() -> None:
    result = rate(THREE, style_control=False, with_online_elo=False)
    assert result.fragility is None
    assert "fragility" not in result.to_dict()


def test_a_negative_top_is_refused() -> None:
    with pytest.raises(EngineError, match="fragility_top"):
        rate(THREE, style_control=False, fragility_top=-1)
