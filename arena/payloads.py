"""The arena's JSON contracts: what a battle looks like to a client, and the vocabularies in it.

``BattlePayload`` is the body of ``GET/POST /api/battles/…`` and the ``battle`` of the live
``turn_start``/``turn_end`` frames (the API's generated document, ``/api/openapi.json``, has
its schema). The
``Literal``s are the values of the models' ``TextChoices`` (``Vote.Winner``, ``Battle.State``,
…), spelled once here for the type checker; a test holds the two equal.
"""

from typing import Literal, NotRequired, TypeGuard, get_args

# The API's response schemas: pydantic needs typing_extensions' TypedDict on Python 3.11.
from typing_extensions import TypedDict

Winner = Literal["model_a", "model_b", "tie", "tie (bothbad)"]
"""A vote's verdict (``Vote.Winner``), in the public Chatbot Arena spelling."""
Side = Literal["a", "b"]
"""A battle's side (``BattleMessage.Side``)."""
BattleMode = Literal["anonymous", "named"]
BattleSource = Literal["pool", "live", "mixed", "import", "env"]
"""A battle's source (``Battle.Source``). A payload never says ``env``: an environment battle is
shown as the pool battle it stands in for (``arena.selectors.battle_payload``)."""
BattleState = Literal["streaming", "ready", "voted", "aborted", "errored"]
MessageStatus = Literal["streaming", "done", "aborted", "error"]

WINNERS: frozenset[Winner] = frozenset(get_args(Winner))


def is_winner(value: object) -> TypeGuard[Winner]:
    return isinstance(value, str) and value in WINNERS


class SideMessage(TypedDict):
    """One side's answer in a turn."""

    content: str
    status: MessageStatus
    error: bool  # whether the answer failed; the error itself stays on the server


class Turn(TypedDict):
    """One user turn and the two answers to it (a side is absent until it has a message)."""

    index: int
    prompt: str
    a: NotRequired[SideMessage]
    b: NotRequired[SideMessage]


class ModelPublic(TypedDict):
    """What a client is told of a model once it may know which one it is."""

    slug: str
    name: str
    organization: str
    license: str


class BattleModels(TypedDict):
    a: ModelPublic
    b: ModelPublic


class VoteResult(TypedDict):
    winner: Winner


class BattlePayload(TypedDict):
    id: str
    mode: BattleMode
    source: BattleSource
    state: BattleState
    votable: bool
    turns: list[Turn]
    images: list[str]  # the URLs of the prompt's images, sent with its first turn
    vote: VoteResult | None  # None until voted
    models: BattleModels | None  # None while the battle is anonymous and not voted on


# --- the live battle's frames, server to client (arena/live/consumer.py) ---------------------


class LiveModel(TypedDict):
    """A model a visitor may pick in named mode."""

    slug: str
    name: str
    organization: str


class ModelsFrame(TypedDict):
    type: Literal["models"]
    models: list[LiveModel]


class SuggestionFrame(TypedDict):
    type: Literal["suggestion"]
    prompt: str


class TurnStartFrame(TypedDict):
    type: Literal["turn_start"]
    battle: BattlePayload  # as at the start of the turn
    turn: int
    prompt: str
    regenerated: bool


class DeltasFrame(TypedDict):
    """The sides' next text, buffered per socket (``consumer._queue_delta``): only sides with some."""

    type: Literal["deltas"]
    a: NotRequired[str]
    b: NotRequired[str]


class SideEndFrame(TypedDict):
    type: Literal["side_end"]
    side: Side
    status: MessageStatus
    error: NotRequired[str]  # what the visitor is told of a failed answer ("" if none)


class TurnEndFrame(TypedDict):
    type: Literal["turn_end"]
    battle: BattlePayload  # as saved


class ErrorDetail(TypedDict):
    code: str  # an arena.errors.ErrorCode value
    message: str
    field: NotRequired[str]  # the request field at fault, when there is one


class ErrorBody(TypedDict):
    """An API error's HTTP body (``ArenaError.as_dict``)."""

    error: ErrorDetail


class ErrorFrame(TypedDict):
    type: Literal["error"]
    code: str
    message: str
    field: str | None
    # Set on the error answering a ``vote`` frame: "vote", and the battle it named.
    reply_to: NotRequired[Literal["vote"]]
    battle_id: NotRequired[str]


class VotedFrame(TypedDict):
    type: Literal["voted"]
    battle: BattlePayload  # as ``POST /api/battles/<id>/vote`` answers: the models named


Frame = (
    ModelsFrame
    | SuggestionFrame
    | TurnStartFrame
    | DeltasFrame
    | SideEndFrame
    | TurnEndFrame
    | VotedFrame
    | ErrorFrame
)
