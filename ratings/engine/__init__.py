"""The arena's rating engine: Bradley-Terry with style control, without Django.

Public API: ``rate``, ``flatten_conv_metadata``, ``EngineError``, ``read_battles`` (files in
the public arena schema), ``online_elo`` and the schema constants.
"""

from .api import ELO_PER_LOGIT, rate, upper_bound_ranks
from .data import OUTCOMES, STYLE_COLUMNS, STYLE_ELEMENTS, BattleTable, flatten_conv_metadata
from .elo import online_elo
from .errors import EngineError
from .io import read_battles

__all__ = [
    "BattleTable",
    "ELO_PER_LOGIT",
    "OUTCOMES",
    "STYLE_COLUMNS",
    "STYLE_ELEMENTS",
    "EngineError",
    "flatten_conv_metadata",
    "online_elo",
    "rate",
    "read_battles",
    "upper_bound_ranks",
]
