"""The red-teaming page's JSON shapes: what the websocket sends (``redteam.consumer``)."""

from __future__ import annotations

from typing_extensions import TypedDict

from redteam.judges import EvidenceJson, VerdictJson


class ChallengeJson(TypedDict):
    slug: str
    title: str
    rule: str
    kind: str
    difficulty: str


class RevealedModel(TypedDict):
    name: str
    organization: str


class TurnJson(TypedDict):
    turn: int
    prompt: str
    content: str
    status: str
    # The judge's verdict on this answer (None: not judged, e.g. stopped or the judge failed)
    verdict: VerdictJson | None


class AttemptJson(TypedDict):
    id: str
    challenge: ChallengeJson
    state: str
    turns_used: int
    max_turns: int | None
    # When the attempt's time runs out (ISO 8601, UTC); None: no time limit
    deadline: str | None
    # Only once the attempt has ended: who the model was
    model: RevealedModel | None
    verdict_reason: str
    evidence: EvidenceJson | None
