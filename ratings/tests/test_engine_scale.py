"""The rating scale: centred on the established models, so a newcomer's votes do not move it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ratings.engine import EngineError, rate
from ratings.engine.api import leaderboard_ranks

from .test_engine_bt import battles


@pytest.fixture(scope="module")
def demo() -> pd.DataFrame:
    """The demo's 1,751 expert votes (``arena/demo_data``), as ``load_demo`` reads them."""
    from arena.services.demo import DEMO_DATA_DIR, _history_battles

    history, _ = _history_battles(DEMO_DATA_DIR)
    return pd.DataFrame([{k: b[k] for k in ("model_a", "model_b", "winner")} for b in history])


def three_votes_for(df: pd.DataFrame, newcomer: str, opponents: list[str]) -> pd.DataFrame:
    extra = pd.DataFrame(
        {"model_a": [newcomer] * 3, "model_b": opponents, "winner": ["model_a", "tie", "model_a"]}
    )
    return pd.concat([df, extra], ignore_index=True)


def test_three_votes_for_a_newcomer_move_no_established_model_and_rank_it_last(demo):
    before = rate(demo, style_control=False, established_min_votes=50)
    top = [m.model for m in before.models[:3]]
    after = rate(
        three_votes_for(demo, "newcomer", top), style_control=False, established_min_votes=50
    )

    old = {m.model: m for m in before.models}
    for m in after.models:
        if m.model in old and old[m.model].votes >= 100:
            assert abs(m.rating - old[m.model].rating) <= 5, m.model
    new = next(m for m in after.models if m.model == "newcomer")
    assert new.preliminary and new.votes == 3
    assert new.rating_lower < new.rating < new.rating_upper
    assert all(new.rank > m.rank for m in after.models if m.votes >= 500)
    assert after.models[-1].model == "newcomer"  # listed after every established model
    assert after.method.centre == "established" and after.method.warnings == ()


def test_centred_on_every_model_the_same_votes_move_the_board(demo):
    """What the established mean protects against: the old transform on the same votes."""
    before = rate(demo, style_control=False)
    top = [m.model for m in before.models[:3]]
    after = rate(three_votes_for(demo, "newcomer", top), style_control=False)
    old = {m.model: m.rating for m in before.models}
    assert max(abs(m.rating - old[m.model]) for m in after.models if m.model in old) > 5


def test_the_established_models_average_1000():
    df = battles(n=400, p=5, style=False)
    df = three_votes_for(df, "newbie", ["m0", "m1", "m2"])
    result = rate(df, style_control=False, established_min_votes=50)
    established = [m.rating for m in result.models if not m.preliminary]
    assert len(established) == 5 and np.mean(established) == pytest.approx(1000.0)


@pytest.mark.parametrize("anchor", ["absent", "newbie"], ids=["missing", "preliminary"])
def test_an_anchor_that_cannot_serve_falls_back_to_the_established_mean_with_a_warning(anchor):
    df = three_votes_for(battles(n=400, p=5, style=False), "newbie", ["m0", "m1", "m2"])
    centred = rate(df, style_control=False, established_min_votes=50)
    result = rate(
        df,
        style_control=False,
        established_min_votes=50,
        anchor=(anchor, 1200.0),
        anchor_fallback=True,
    )
    assert result.method.centre == "established" and result.method.anchor is None
    assert len(result.method.warnings) == 1 and repr(anchor) in result.method.warnings[0]
    assert [m.rating for m in result.models] == pytest.approx([m.rating for m in centred.models])
    with pytest.raises(EngineError, match=anchor):
        rate(df, style_control=False, established_min_votes=50, anchor=(anchor, 1200.0))


def test_an_established_anchor_pins_the_scale():
    df = three_votes_for(battles(n=400, p=5, style=False), "newbie", ["m0", "m1", "m2"])
    result = rate(df, style_control=False, established_min_votes=50, anchor=("m2", 1200.0))
    m2 = next(m for m in result.models if m.model == "m2")
    assert result.method.centre == "anchor" and m2.rating == pytest.approx(1200.0)


def test_a_preliminary_model_is_never_ranked_above_an_established_one():
    lower = np.array([900.0, 950.0, 1300.0, 700.0])
    upper = np.array([1000.0, 1050.0, 1500.0, 800.0])
    preliminary = np.array([False, False, True, True])
    assert leaderboard_ranks(lower, upper, preliminary) == [1, 1, 2, 4]
