"""The arena's rating engine: Bradley-Terry with style control, without Django.

Public API: ``rate`` (returns a ``RatingResult``; ``to_dict()`` for JSON), ``identify_table`` (which models can be rated, without fitting),
``flatten_conv_metadata``, ``EngineError`` and ``CannotRateError`` (valid battles that do not
determine ratings), ``Provisional``, ``read_battles`` (files in the public arena schema),
``online_elo`` and the schema constants; ``rate_parquet`` fits a Parquet file too large for
memory from sums over batches (same results as ``rate``, sandwich intervals only).
"""

from .api import ELO_PER_LOGIT, identify_table, rate, upper_bound_ranks
from .data import OUTCOMES, STYLE_COLUMNS, STYLE_ELEMENTS, BattleTable, flatten_conv_metadata
from .elo import online_elo
from .errors import CannotRateError, EngineError
from .identify import (
    PROVISIONAL_REASONS,
    Identification,
    Provisional,
    ProvisionalDict,
    ProvisionalReason,
    Record,
)
from .io import read_battles
from .result import (
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

__all__ = [
    "BattleTable",
    "CannotRateError",
    "ELO_PER_LOGIT",
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
    "ModelRatingDict",
    "RatingResult",
    "RatingResultDict",
    "flatten_conv_metadata",
    "identify_table",
    "online_elo",
    "rate",
    "rate_parquet",
    "read_battles",
    "upper_bound_ranks",
]
