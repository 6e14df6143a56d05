"""One view's fit in memory, and the scale options both refit paths share.

``fit_battles`` rates a view's battles held in a DataFrame with ``ratings.engine.rate``; the
streamed path (``ratings.vote_sources.ParquetVotes``) calls ``engine.rate_parquet`` with the
same ``scale_options``, so the scale means the same whichever path a snapshot takes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from django.conf import settings

from ratings import engine
from ratings.cli import parse_anchor
from ratings.selectors import draw_propensity


def _anchor(params: dict[str, Any]) -> tuple[str, float] | None:
    """``RATINGS_ANCHOR_MODEL`` (``slug=rating``, checked at start) as the engine's anchor."""
    return parse_anchor(params["anchor"]) if params.get("anchor") else None


def scale_options(params: dict[str, Any]) -> dict[str, Any]:
    """The scale's options, the same for the in-memory and the streamed fit: centred on the
    established models, or on the anchor, falling back with a warning where it cannot serve."""
    return {
        "anchor": _anchor(params),
        "anchor_fallback": True,
        "established_min_votes": params.get("established_min_votes", 0),
    }


def weighting_options(params: dict[str, Any]) -> dict[str, Any]:
    """The position term and the inverse-propensity weights, the same for both refit paths
    (``RATINGS_POSITION``, ``RATINGS_INVERSE_PROPENSITY``; see ``selectors.draw_propensity``)."""
    propensity = None
    if params.get("inverse_propensity"):
        propensity = draw_propensity(float(params["propensity_min_share"]))
    return {"position": bool(params.get("position")), "propensity": propensity}


def fit_battles(
    battles: pd.DataFrame,
    *,
    style_control: bool,
    params: dict[str, Any],
    shown: set[str] | None = None,
    weighting: dict[str, Any] | None = None,
) -> engine.RatingResult:
    """The view's fit, with the fragility of the first ``params["fragility_top"]`` ranks among
    the ``shown`` models (``ratings.engine.fragility``; none when the params lack it).
    ``weighting``: ``weighting_options(params)`` when the caller computed it once for its run."""
    columns = ["model_a", "model_b", "winner"]
    if style_control:
        frame = engine.flatten_conv_metadata(battles[[*columns, "conv_metadata"]])
    else:
        frame = battles[columns]
    return engine.rate(
        frame.reset_index(drop=True),
        style_control=style_control,
        ci=params["ci"],
        rounds=params["rounds"] or 100,
        seed=params["seed"],
        workers=settings.RATINGS_BOOTSTRAP_WORKERS,  # not in params: results do not depend on it
        fragility_top=params.get("fragility_top") or 0,
        fragility_among=shown,
        **scale_options(params),
        **(weighting if weighting is not None else weighting_options(params)),
    )
