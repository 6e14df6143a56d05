"""What ``rate`` returns: a frozen result object, and the JSON shape of its ``to_dict()``.

As with a scikit-learn estimator's fitted attributes or a statsmodels results object, callers
read attributes (``result.models[0].rating``, ``result.method.iterations``) and convert to JSON
once, at the edge (the snapshot payload, the command line's ``--format json``). The
``*Dict`` ``TypedDict``\\ s describe that JSON; it is the snapshot payload's schema for one
view, so a change here is a change of ``ratings.services.PAYLOAD_SCHEMA``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NotRequired, Protocol, TypedDict, TypeVar

if TYPE_CHECKING:
    # Annotations only: the JSON shapes here load without numpy (a web worker reads them).
    from .provisional import Provisional, ProvisionalDict

#: ``method.scale``: what one unit of rating means.
SCALE = "400/ln(10) Elo points per logit"

#: Rated votes (battles in the fit) a model needs to be *established*: ranked among the others
#: and part of the mean the scale is centred on. Fewer and it is *preliminary*. With an even
#: record a rating's standard error is about ``(400 / ln 10) * 2 / sqrt(n)`` Elo, so at 50 votes
#: its 95% interval is about +-96 points, the spread of a few neighbouring ranks; with fewer
#: it spans most of a board (+-136 at 25, +-340 at 4).
ESTABLISHED_MIN_VOTES = 50

#: ``method.centre``: what the scale's zero is (``api.rating_scale``): the anchor model, the
#: mean of the established models, or the mean of every rated model (none is established).
Centre = Literal["anchor", "established", "all"]

_T = TypeVar("_T")


class ModelRatingDict(TypedDict):
    model: str
    rating: float
    rating_lower: float
    rating_upper: float
    rank: int
    votes: int
    preliminary: bool
    # The rank spread is ``rank`` to ``rank_worst``; ``tier`` is None for a preliminary model
    # (``ranks.leaderboard_positions``). A snapshot written before them lacks both.
    rank_worst: NotRequired[int]
    tier: NotRequired[int | None]


class AnchorDict(TypedDict):
    model: str
    rating: float


class MethodDict(TypedDict):
    style_control: bool
    ci: str
    rounds: int | None
    seed: int | None
    anchor: AnchorDict | None
    reweight: bool
    style_l2: float
    iterations: int
    gradient_max_norm: float
    degenerate_style_elements: list[str]
    scale: str
    centre: Centre
    established_min_votes: int
    warnings: list[str]
    position: bool
    inverse_propensity: bool


class PositionDict(TypedDict):
    coefficient: float | None
    standard_error: float | None
    interval: list[float] | None


class MatricesDict(TypedDict):
    models: list[str]
    battle_counts: list[list[int]]
    win_fraction: list[list[float | None]]
    predicted_win_probability: list[list[float]]


class BoundDict(TypedDict):
    """A count of votes verified by a refit (``fragility.Bound``)."""

    votes: int
    exact: bool
    estimate: int | None


class LeaderBoundDict(BoundDict):
    challenger: str


class PairFragilityDict(TypedDict):
    rank: int
    upper: str
    lower: str
    gap: float  # rating points
    removal: BoundDict | None
    flip: BoundDict | None


class FragilityDict(TypedDict):
    pairs: list[PairFragilityDict]
    leader: str | None
    leader_removal: LeaderBoundDict | None
    leader_flip: LeaderBoundDict | None
    n_battles: int
    refits: int
    top: int
    method: str


class FragilityAudit(Protocol):
    """What a result holds of its fragility audit (``fragility.Fragility``)."""

    def to_dict(self) -> FragilityDict: ...


class RatingResultDict(TypedDict):
    models: list[ModelRatingDict]
    style_coefficients: dict[str, float | None] | None
    style_coefficient_intervals: dict[str, list[float] | None] | None
    n_battles: int
    n_battles_input: int
    provisional: list[ProvisionalDict]
    method: MethodDict
    matrices: MatricesDict
    online_elo: dict[str, float] | None
    position: PositionDict | None
    # Only when asked for (``rate(fragility_top=...)``); see ``fragility``.
    fragility: NotRequired[FragilityDict]


@dataclass(frozen=True)
class ModelRating:
    """One rated model: its rating, 95% interval, rank (by upper bounds) and votes in the fit.

    ``preliminary``: fewer votes than ``method.established_min_votes``; it is listed after the
    established models and never ranked above one (``ranks.leaderboard_ranks``).
    ``rank_worst``: the worst rank its interval allows, so that its rank spread is ``rank`` to
    ``rank_worst``; ``tier``: its tier among the established models from 1, None when
    preliminary (``ranks.leaderboard_positions``; None for both when not computed).
    """

    model: str
    rating: float
    rating_lower: float
    rating_upper: float
    rank: int
    votes: int
    preliminary: bool = False
    rank_worst: int | None = None
    tier: int | None = None

    def to_dict(self) -> ModelRatingDict:
        row: ModelRatingDict = {
            "model": self.model,
            "rating": self.rating,
            "rating_lower": self.rating_lower,
            "rating_upper": self.rating_upper,
            "rank": self.rank,
            "votes": self.votes,
            "preliminary": self.preliminary,
        }
        if self.rank_worst is not None:
            row["rank_worst"] = self.rank_worst
            row["tier"] = self.tier
        return row


@dataclass(frozen=True)
class Method:
    """How the ratings were fitted: the options given and the fit's convergence."""

    style_control: bool
    ci: str
    rounds: int | None  # bootstrap only
    seed: int | None  # bootstrap only
    anchor: tuple[str, float] | None
    reweight: bool
    style_l2: float
    iterations: int
    gradient_max_norm: float
    degenerate_style_elements: tuple[str, ...]
    centre: Centre = "all"
    established_min_votes: int = 0
    warnings: tuple[str, ...] = ()  # e.g. an anchor that could not serve, and what replaced it
    scale: str = SCALE
    position: bool = False  # the left side's covariate was in the fit
    inverse_propensity: bool = False  # battles were weighted by 1 / P(pair drawn)

    def to_dict(self) -> MethodDict:
        anchor: AnchorDict | None = None
        if self.anchor is not None:
            anchor = {"model": self.anchor[0], "rating": float(self.anchor[1])}
        return {
            "style_control": self.style_control,
            "ci": self.ci,
            "rounds": self.rounds,
            "seed": self.seed,
            "anchor": anchor,
            "reweight": self.reweight,
            "style_l2": self.style_l2,
            "iterations": self.iterations,
            "gradient_max_norm": self.gradient_max_norm,
            "degenerate_style_elements": list(self.degenerate_style_elements),
            "scale": self.scale,
            "centre": self.centre,
            "established_min_votes": self.established_min_votes,
            "warnings": list(self.warnings),
            "position": self.position,
            "inverse_propensity": self.inverse_propensity,
        }


@dataclass(frozen=True)
class PositionEffect:
    """The log-odds advantage of side A (shown on the left) over side B, for two models of
    equal rating and style, with its standard error and 95% interval (sandwich, or the
    bootstrap's percentiles and deviation). Every field is ``None`` when the data cannot tell
    it from the ratings (each pair met in one orientation only)."""

    coefficient: float | None
    standard_error: float | None
    lower: float | None
    upper: float | None

    def to_dict(self) -> PositionDict:
        interval = None
        if self.lower is not None and self.upper is not None:
            interval = [self.lower, self.upper]
        return {
            "coefficient": self.coefficient,
            "standard_error": self.standard_error,
            "interval": interval,
        }


@dataclass(frozen=True)
class Matrices:
    """Pairwise tables over the rated models, in leaderboard order (row model vs column model).

    ``win_fraction`` is ``None`` where two models never met; ``predicted_win_probability`` is
    ``sigma(theta_i - theta_j)``, for answers of equal style.
    """

    models: tuple[str, ...]
    battle_counts: tuple[tuple[int, ...], ...]
    win_fraction: tuple[tuple[float | None, ...], ...]
    predicted_win_probability: tuple[tuple[float, ...], ...]

    def only(self, keep: set[str]) -> Matrices:
        """The rows and columns of the models in ``keep``, order kept."""
        index = [i for i, name in enumerate(self.models) if name in keep]

        def pick(table: tuple[tuple[_T, ...], ...]) -> tuple[tuple[_T, ...], ...]:
            return tuple(tuple(table[i][j] for j in index) for i in index)

        return Matrices(
            models=tuple(self.models[i] for i in index),
            battle_counts=pick(self.battle_counts),
            win_fraction=pick(self.win_fraction),
            predicted_win_probability=pick(self.predicted_win_probability),
        )

    def to_dict(self) -> MatricesDict:
        return {
            "models": list(self.models),
            "battle_counts": [list(row) for row in self.battle_counts],
            "win_fraction": [list(row) for row in self.win_fraction],
            "predicted_win_probability": [list(row) for row in self.predicted_win_probability],
        }


@dataclass(frozen=True)
class RatingResult:
    """The fit: rated models in leaderboard order, the provisional ones, style and method.

    ``style_coefficients`` (logits per standard deviation of each z-scored style element,
    ``None`` for an element that was not estimated) and their 95% ``style_intervals`` are
    ``None`` without style control; ``online_elo`` is ``None`` when the replay was skipped.
    ``n_battles`` counts the battles in the fit, ``n_battles_input`` every battle given.
    """

    models: tuple[ModelRating, ...]
    provisional: tuple[Provisional, ...]
    style_coefficients: dict[str, float | None] | None
    style_intervals: dict[str, tuple[float, float] | None] | None
    n_battles: int
    n_battles_input: int
    method: Method
    matrices: Matrices
    online_elo: dict[str, float] | None
    position: PositionEffect | None = None  # None when the fit had no position covariate
    # ``fragility.Fragility``, typed by what the result needs of it: the audit imports this
    # module's JSON shapes, so this module does not import it back.
    fragility: FragilityAudit | None = None

    def to_dict(self) -> RatingResultDict:
        """The JSON-ready form (the snapshot payload's per-view result; CLI ``--format json``)."""
        intervals: dict[str, list[float] | None] | None = None
        if self.style_intervals is not None:
            intervals = {
                name: None if bounds is None else list(bounds)
                for name, bounds in self.style_intervals.items()
            }
        out: RatingResultDict = {
            "models": [m.to_dict() for m in self.models],
            "style_coefficients": (
                None if self.style_coefficients is None else dict(self.style_coefficients)
            ),
            "style_coefficient_intervals": intervals,
            "n_battles": self.n_battles,
            "n_battles_input": self.n_battles_input,
            "provisional": [entry.as_dict() for entry in self.provisional],
            "method": self.method.to_dict(),
            "matrices": self.matrices.to_dict(),
            "online_elo": None if self.online_elo is None else dict(self.online_elo),
            "position": None if self.position is None else self.position.to_dict(),
        }
        if self.fragility is not None:
            out["fragility"] = self.fragility.to_dict()
        return out
