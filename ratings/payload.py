"""The snapshot payload's shape: what ``services.snapshot_build`` writes and the page reads back.

A ``LeaderboardSnapshot.payload`` is a ``SnapshotPayload``; each category's ``results`` hold,
per style setting (``"on"``, ``"off"``), the engine's ``RatingResult.to_dict()`` restricted to
public models (``ratings.engine.RatingResultDict``), or ``None`` when that view is not rated.
Changing a key here is a change of ``PAYLOAD_SCHEMA``. Django-free, like the engine.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from ratings.engine import ModelRatingDict, RatingResultDict

# 2: provisional models (``results[style]["provisional"]`` and ``provisional[style]``).
# 3: ``excluded`` (votes left out, by reason) and ``sampling`` (the active sampling's inputs).
# 4: ``preliminary`` on each rated row; ``centre``, ``established_min_votes`` and ``warnings``
#    (e.g. an anchor that could not serve) in each result's ``method``.
# 5: ``records`` (each pair's rated outcomes) and ``served`` (what /transparency lists), so
#    that the pages read them from the snapshot instead of counting votes per visit.
# 6: a category's ``reason`` and ``reasons`` are codes with their figures (``ViewReason``),
#    worded by the pages in their language; before, English sentences.
# 7: ``position`` in each result (the left side's coefficient, standard error and interval, or
#    None without ``RATINGS_POSITION``) and ``position``, ``inverse_propensity`` in its ``method``.
# 8: ``fragility`` in the overall view's results (``ratings.engine.fragility``): how many
#    votes removed or flipped swap each adjacent rank of the top, verified by refitting.
# 9: ``rank_worst`` (the rank spread is ``rank`` to ``rank_worst``) and ``tier`` (None for a
#    preliminary model) on each rated row (``ratings.engine.ranks``).
# 10: ``ledger`` (the fairness ledger's counts, ``arena.ledger.ledger_counts_json``).
PAYLOAD_SCHEMA = 10

#: Why a model is listed as provisional in a snapshot: the engine's reasons, and ``few_votes``
#: for a model in a view that has too few votes to rate anyone.
SnapshotReason = Literal["no_losses", "no_wins", "not_connected", "few_votes"]

#: ``"insufficient"`` when neither style setting could be rated (or too few votes).
CategoryStatus = Literal["ok", "insufficient"]

#: Why a category, or one style setting of it, is not rated: ``too_few_votes`` (fewer than
#: ``needed`` votes), ``too_few_models`` (its votes compare fewer than two models),
#: ``no_comparable_models`` (each model won every comparison, lost every one, or met none of
#: the others), ``fit_failed`` (the engine found no ratings: its exception's class name only,
#: its text is logged, never stored).
ViewReasonCode = Literal["too_few_votes", "too_few_models", "no_comparable_models", "fit_failed"]


class ViewReason(TypedDict):
    """A reason as a snapshot stores it: a code and its figures, worded where it is shown
    (``ratings.category_text.view_reason_text``)."""

    code: ViewReasonCode
    votes: NotRequired[int]
    needed: NotRequired[int]
    error: NotRequired[str]


class ProvisionalEntry(TypedDict):
    """A provisional row: a model that is not rated in a view, its record and why."""

    model: str
    battles: int
    wins: int
    losses: int
    ties: int
    reason: SnapshotReason


#: A rated row, as the engine writes it.
RatedEntry = ModelRatingDict


class ModelMeta(TypedDict):
    """What the page shows about a model besides its rating."""

    name: str
    organization: str
    license: str
    active: bool


class CategoryEntry(TypedDict):
    """One category of the payload: its votes, status and both style settings' results."""

    key: str
    label: str
    description: str
    n_votes: int
    status: CategoryStatus
    # Why the category is insufficient; "" when it is "ok" (an English sentence before schema 6).
    reason: ViewReason | str
    results: dict[str, RatingResultDict | None]  # by style setting
    reasons: NotRequired[dict[str, ViewReason | str]]  # by style setting, for views not rated
    provisional: NotRequired[dict[str, list[ProvisionalEntry]]]  # same, every model listed


class SourceCapCounts(TypedDict):
    """Votes left out because their source (address hash, or session) already had
    ``max(min_votes, share x the other sources' votes)`` rated votes on one of their models:
    ``votes`` over ``sources`` sources (``RATINGS_SOURCE_MIN_VOTES``,
    ``RATINGS_SOURCE_MAX_SHARE``; share 0: nothing left out)."""

    votes: int
    sources: int
    min_votes: int
    share: float


class DuplicatePromptCounts(TypedDict):
    """Votes left out because their visitor's prompt (normalised, ``arena.prompt_text``) was
    rated more than ``cap`` times: ``votes`` past the first ``cap`` of each such prompt, over
    ``prompts`` prompts. ``cap`` is ``RATINGS_DUPLICATE_PROMPT_CAP`` (0: nothing left out)."""

    votes: int
    prompts: int
    cap: int


class ExcludedCounts(TypedDict):
    """Votes left out of the ratings, environment battles aside (they are never counted).

    ``named``: votes on battles whose models were shown before the vote; ``flagged``: anonymous
    votes carrying a flag; ``by_reason``: flagged anonymous votes per reason (a vote with two
    reasons counts under both).
    """

    named: int
    flagged: int
    by_reason: dict[str, int]
    # Written since repeated prompts are down-sampled; an older snapshot lacks it.
    duplicate_prompts: NotRequired[DuplicatePromptCounts]
    # Written since each source's influence is bounded; an older snapshot lacks it.
    source_cap: NotRequired[SourceCapCounts]


class SamplingInputs(TypedDict):
    """What active pair sampling reads (``arena.sampling.rule``), from the overall view without
    style control, every model included (private variants too): standard errors in rating
    points by slug, and battles per pair ``[slug, slug, n]``."""

    se: dict[str, float]
    counts: list[tuple[str, str, int]]
    # The models rated and not preliminary in that view (the draw bridges the others to them,
    # ``arena.services.bridge``); an older snapshot lacks it.
    established: NotRequired[list[str]]


class SnapshotPayload(TypedDict):
    schema: int
    models: dict[str, ModelMeta]  # by slug: public models that have votes
    categories: list[CategoryEntry]
    excluded: NotRequired[ExcludedCounts]
    sampling: NotRequired[SamplingInputs]
    # Rated votes by their battle's source (``pool``, ``live``, ``mixed``, ``import``); an older
    # snapshot lacks it.
    by_source: NotRequired[dict[str, int]]
    # Each pair of public models' rated outcomes, ``[slug, slug, first's wins, second's wins,
    # ties]`` (slugs in string order; ``ratings.vote_sources.PairRecord``): the model pages'
    # record against each opponent. Schema 5; an older snapshot lacks it.
    records: NotRequired[list[tuple[str, str, int, int, int]]]
    # Every model served, battles and votes by source, flags by reason, as the snapshot was
    # written (``arena.transparency.served_summary_json``). Schema 5; an older one lacks it.
    served: NotRequired[dict[str, Any]]
    # The fairness ledger's counts as the snapshot was written (``arena.ledger``). Schema 10;
    # an older one lacks it.
    ledger: NotRequired[dict[str, Any]]
    # The sum of the ids of the ties reactions decided (RATINGS_COUNT_REACTIONS; else 0): part of
    # "the same votes" for the next refit. An older snapshot lacks it (read as 0).
    reaction_decided: NotRequired[int]
