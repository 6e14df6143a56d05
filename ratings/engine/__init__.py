"""The arena's rating engine: Bradley-Terry with style control, without Django.

Public API: ``rate`` (returns a ``RatingResult``; ``to_dict()`` for JSON), ``identify_table`` (which models can be rated, without fitting),
``flatten_conv_metadata``, ``EngineError`` and ``CannotRateError`` (valid battles that do not
determine ratings), ``Provisional``, ``read_battles`` (files in the public arena schema),
``online_elo`` and the schema constants; ``rate_parquet`` fits a Parquet file too large for
memory from sums over batches (same results as ``rate``, sandwich intervals only).

Each public name is imported from its module on first use (PEP 562 ``__getattr__``), so that
``import ratings.engine.errors`` or a payload's ``TypedDict`` does not load pyarrow and the
fitting code: a web worker that only shows snapshots, and ``manage.py rate --help``, stay small.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import ELO_PER_LOGIT, identify_table, rate
    from .data import OUTCOMES, STYLE_COLUMNS, STYLE_ELEMENTS, BattleTable, flatten_conv_metadata
    from .elo import online_elo
    from .errors import CannotRateError, EngineError
    from .identify import Identification, Record
    from .io import read_battles
    from .provisional import (
        PROVISIONAL_REASONS,
        Provisional,
        ProvisionalDict,
        ProvisionalReason,
    )
    from .ranks import (
        Positions,
        leaderboard_positions,
        leaderboard_ranks,
        rank_spreads,
        tiers,
        upper_bound_ranks,
    )
    from .result import (
        ESTABLISHED_MIN_VOTES,
        Matrices,
        MatricesDict,
        Method,
        MethodDict,
        ModelRating,
        ModelRatingDict,
        RatingResult,
        RatingResultDict,
    )
    from .stream import rate_parquet

_MODULE_OF = {
    "ELO_PER_LOGIT": "api",
    "ESTABLISHED_MIN_VOTES": "result",
    "identify_table": "api",
    "rate": "api",
    "Positions": "ranks",
    "leaderboard_positions": "ranks",
    "leaderboard_ranks": "ranks",
    "rank_spreads": "ranks",
    "tiers": "ranks",
    "upper_bound_ranks": "ranks",
    "OUTCOMES": "data",
    "STYLE_COLUMNS": "data",
    "STYLE_ELEMENTS": "data",
    "BattleTable": "data",
    "flatten_conv_metadata": "data",
    "online_elo": "elo",
    "CannotRateError": "errors",
    "EngineError": "errors",
    "PROVISIONAL_REASONS": "provisional",
    "Identification": "identify",
    "Provisional": "provisional",
    "ProvisionalDict": "provisional",
    "ProvisionalReason": "provisional",
    "Record": "identify",
    "read_battles": "io",
    "Matrices": "result",
    "MatricesDict": "result",
    "Method": "result",
    "MethodDict": "result",
    "ModelRating": "result",
    "ModelRatingDict": "result",
    "RatingResult": "result",
    "RatingResultDict": "result",
    "rate_parquet": "stream",
}

__all__ = [
    "BattleTable",
    "CannotRateError",
    "ELO_PER_LOGIT",
    "ESTABLISHED_MIN_VOTES",
    "OUTCOMES",
    "PROVISIONAL_REASONS",
    "Provisional",
    "ProvisionalDict",
    "ProvisionalReason",
    "Record",
    "STYLE_COLUMNS",
    "STYLE_ELEMENTS",
    "EngineError",
    "Identification",
    "Matrices",
    "MatricesDict",
    "Method",
    "MethodDict",
    "ModelRating",
    "Positions",
    "ModelRatingDict",
    "RatingResult",
    "RatingResultDict",
    "flatten_conv_metadata",
    "identify_table",
    "leaderboard_positions",
    "leaderboard_ranks",
    "online_elo",
    "rate",
    "rank_spreads",
    "rate_parquet",
    "read_battles",
    "tiers",
    "upper_bound_ranks",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
