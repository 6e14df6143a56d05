"""The leaderboard downloads, ``/leaderboard.json`` and ``/leaderboard.csv``, as django-ninja
operations: a router that ``config.api`` mounts beside the visitor API, so that one generated
document describes both. The answers are ``ratings.views``' (a download is no page, and its
404 before the first snapshot is JSON); the schemas below describe them for the document.
"""

from typing import Annotated, Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema
from pydantic import ConfigDict

from ratings import views
from ratings.payload import ViewReasonCode

router = Router(tags=["leaderboard"])


class _Out(Schema):
    model_config = ConfigDict(extra="forbid")


class DuplicatePrompts(_Out):
    """Votes left out because their visitor's prompt (first turn, normalised) was rated more
    than cap times (RATINGS_DUPLICATE_PROMPT_CAP; 0: no cap)."""

    votes: int = Field(ge=0)
    prompts: int = Field(ge=0)
    cap: int = Field(ge=0)


class SourceCap(_Out):
    """Votes left out because their source (an address hash, or a session where no address
    was kept) already had max(min_votes, share x the model's votes from the other sources)
    rated votes on one of their models (RATINGS_SOURCE_MIN_VOTES, RATINGS_SOURCE_MAX_SHARE)."""

    votes: int = Field(ge=0)
    sources: int = Field(ge=0)
    min_votes: int = Field(ge=1)
    share: float = Field(ge=0)


class Excluded(_Out):
    """Votes left out of the ratings: named votes, flagged anonymous votes, and flagged votes
    per reason (a vote with two reasons counts under both)."""

    named: int = Field(ge=0)
    flagged: int = Field(ge=0)
    by_reason: dict[str, Annotated[int, Field(ge=0)]]
    duplicate_prompts: DuplicatePrompts | None = Field(
        None, description="Absent from snapshots written before repeated prompts were capped."
    )
    source_cap: SourceCap | None = Field(
        None, description="Absent from snapshots written before sources were bounded."
    )


class SnapshotOut(_Out):
    id: int
    created_at: str = Field(json_schema_extra={"format": "date-time"})
    vote_high_water: int
    n_votes: int = Field(ge=0)
    params: dict[str, Any]
    by_source: dict[str, int] | None = Field(
        None,
        description="Rated votes by their battle's source (pool, live, mixed, import); null "
        "for snapshots written before it was kept.",
    )
    excluded: Excluded | None = Field(
        None, description="Null for snapshots written before these counts were kept."
    )


class CategoryOut(_Out):
    key: str
    label: str
    description: str
    n_votes: int = Field(ge=0)


class RatedModel(_Out):
    rank: int = Field(ge=1)
    model: str
    name: str
    organization: str
    license: str
    active: bool
    rating: float
    rating_lower: float
    rating_upper: float
    votes: int = Field(ge=0)
    rank_worst: int | None = Field(
        None,
        ge=1,
        description="The worst rank the 95% intervals allow: the rank spread is rank to "
        "rank_worst. Null for snapshots written before it was computed.",
    )
    tier: int | None = Field(
        None,
        ge=1,
        description="The model's tier, from 1: models in rating order whose intervals reach "
        "the interval of their tier's top model. Null for a preliminary model and for "
        "snapshots written before tiers.",
    )
    preliminary: bool = Field(
        description="Fewer rated votes than RATINGS_ESTABLISHED_MIN_VOTES in this view: shown "
        "with its rating and interval, ranked after every established model."
    )


class ProvisionalModel(_Out):
    model: str
    name: str
    organization: str
    license: str
    active: bool
    battles: int = Field(ge=0)
    wins: int = Field(ge=0)
    losses: int = Field(ge=0)
    ties: int = Field(ge=0)
    reason: str
    reason_text: str = Field(
        description="Why the model is not rated and what would rate it, in words."
    )


class Matrices(Schema):
    models: list[str]
    win_fraction: list[list[float | None]]
    battle_counts: list[list[int]]
    predicted_win_probability: list[list[float | None]] | None = None


class ReasonCodeOut(_Out):
    """Why the view is not rated, as a code and its figures (``ratings.payload.ViewReason``)."""

    code: ViewReasonCode
    votes: Annotated[int, Field(ge=0)] | None = None
    needed: Annotated[int, Field(ge=0)] | None = None
    error: str | None = Field(None, description="The rating engine's exception class, if any.")


class PositionOut(_Out):
    coefficient: float | None = Field(description="Logits; null when not identified.")
    standard_error: float | None
    interval: list[float] | None


class LeaderboardOut(_Out):
    snapshot: SnapshotOut
    category: CategoryOut
    status: Literal["ok", "insufficient"]
    reason: str = Field(description="Why the view is not rated, in English words.")
    reason_code: ReasonCodeOut | None
    style_control: bool
    models: list[RatedModel]
    provisional: list[ProvisionalModel]
    style_coefficients: dict[str, float | None] | None
    style_coefficient_intervals: dict[str, list[float] | None] | None
    n_battles: int = Field(ge=0)
    n_battles_input: int = Field(ge=0)
    method: dict[str, Any] | None
    position: PositionOut | None = Field(
        None,
        description="The log-odds advantage of the answer shown on the left (side A) for two "
        "models of equal rating and style, with its standard error and 95% interval; null "
        "when the fit had no position term (RATINGS_POSITION off).",
    )
    warnings: list[str] = Field(
        description="What a reader of this view should know: an anchor model that was missing "
        "or preliminary, no established model yet."
    )
    matrices: Matrices | None
    fragility: dict[str, Any] | None = Field(
        None,
        description="For each adjacent pair of the top established models (and the leader "
        "against its challengers), the fewest votes found whose removal, or whose reversed "
        "winner, swaps the pair, each verified by refitting: votes, exact (true only when "
        "proven the fewest) and the influence estimate. Null for snapshots written before it, "
        "streamed ones, and views not rated.",
    )


class NotComputedDetail(_Out):
    code: Literal["not_computed"]
    message: str


class NotComputedOut(_Out):
    """Before the first snapshot."""

    error: NotComputedDetail


# The view's query, read by ``ratings.views`` (which never refuses one).
Category = Annotated[
    str,
    Query(
        "",
        description="A category key of the snapshot (overall, coding, ...); an unknown key "
        "means overall.",
    ),
]
Style = Annotated[
    str, Query("", description="on (the default: style control) or off; any other means on.")
]


@router.get(
    "/leaderboard.json",
    response={200: LeaderboardOut, 404: NotComputedOut},
    summary="The latest leaderboard snapshot of one category and style setting",
    operation_id="leaderboardJson",
    url_name="leaderboard-json",
)
def leaderboard_json(
    request: HttpRequest, category: Category = "", style: Style = ""
) -> HttpResponse:
    return views.leaderboard_json(request)


@router.get(
    "/leaderboard.csv",
    response={404: NotComputedOut},
    summary="The same leaderboard as CSV",
    operation_id="leaderboardCsv",
    url_name="leaderboard-csv",
    openapi_extra={
        "responses": {
            200: {
                "description": "Rated models, then provisional ones (formula-like cells "
                "neutralised). Columns: " + ", ".join(views.CSV_FIELDS) + ".",
                "content": {"text/csv": {"schema": {"type": "string"}}},
            }
        }
    },
)
def leaderboard_csv(
    request: HttpRequest, category: Category = "", style: Style = ""
) -> HttpResponse:
    return views.leaderboard_csv(request)


class LedgerModelOut(_Out):
    slug: str
    name: str
    active: bool = Field(description="Drawn for new battles (false: retired).")
    public: bool = Field(description="Shown on the leaderboard and in named mode.")
    ever_public: bool = Field(description="Public now, or made public at some time.")
    retired_unrecorded: bool = Field(
        description="Retired before retirements were recorded: no date or reason kept."
    )
    release_date: str | None = Field(json_schema_extra={"format": "date"})
    first_public: str | None = Field(
        json_schema_extra={"format": "date-time"},
        description="When a model tested privately was first made public.",
    )
    battles: int = Field(ge=0)
    battles_recent: int = Field(ge=0, description="In the last window_days days.")
    share: float | None = Field(
        ge=0, le=1, description="Of the battle appearances (two a battle); null without any."
    )
    share_recent: float | None = Field(ge=0, le=1)
    votes: int = Field(ge=0)
    exported: int = Field(ge=0, description="Rows of the default vote export with the model.")
    prerelease_battles: int = Field(
        ge=0, description="Battles while private, or before its release date."
    )
    prerelease_votes: int = Field(ge=0)
    equal_counted: bool = Field(
        description="Counted in the equal share of all time (in a battle, or drawable)."
    )
    equal_counted_recent: bool = Field(
        description="Counted in the equal share of the last window_days days."
    )


class LedgerEventOut(_Out):
    slug: str
    name: str
    change: Literal["retired", "reactivated", "published", "unpublished"]
    reason: str = Field(description="Staff's words; never empty for a retirement.")
    at: str = Field(json_schema_extra={"format": "date-time"})


class LedgerProviderOut(_Out):
    name: str = Field(description="The models' organisation, else their endpoint's name.")
    battles: int = Field(ge=0, description="Battles with at least one of its models.")
    votes: int = Field(ge=0)
    exported: int = Field(ge=0)
    share: float | None = Field(ge=0, le=1)
    share_recent: float | None = Field(ge=0, le=1)
    equal_share: float | None = Field(ge=0, le=1)
    equal_share_recent: float | None = Field(ge=0, le=1)
    models: list[LedgerModelOut]
    events: list[LedgerEventOut] = Field(description="Changes of standing, oldest first.")


class LedgerOut(_Out):
    counted_at: str = Field(
        json_schema_extra={"format": "date-time"},
        description="When the counts were made (with the latest snapshot); the events are "
        "as recorded now.",
    )
    window_days: int = Field(ge=1)
    battles: int = Field(ge=0)
    battles_recent: int = Field(ge=0)
    exported: int = Field(ge=0, description="Rows of the default vote export.")
    equal_share: float | None = Field(ge=0, le=1)
    equal_models: int = Field(ge=0)
    equal_share_recent: float | None = Field(ge=0, le=1)
    equal_models_recent: int = Field(ge=0)
    providers: list[LedgerProviderOut]


@router.get(
    "/transparency/ledger.json",
    response={200: LedgerOut},
    summary="The fairness ledger of /transparency: per provider, testing before release, "
    "sampling shares, votes, exported rows, retirements",
    operation_id="transparencyLedgerJson",
    url_name="transparency-ledger-json",
    tags=["transparency"],
)
def transparency_ledger_json(request: HttpRequest) -> HttpResponse:
    return views.transparency_ledger_json(request)
