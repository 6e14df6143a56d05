"""Reads of shared outcomes: what a share's public page and its card show.

A share names both models and the verdict of one voted battle; the prompt only when the voter
chose to include it. Nothing here reads the visitor's identity or the answers.
"""

from dataclasses import dataclass
from datetime import datetime

from django.utils.translation import gettext

from arena.models import BattleMessage, BattleShare

# The page shows a long prompt whole; the card and the page's description take its start.
PROMPT_EXCERPT_CHARS = 180


@dataclass(frozen=True)
class SharedModel:
    slug: str
    name: str
    organization: str


@dataclass(frozen=True)
class SharedOutcome:
    token: str
    model_a: SharedModel
    model_b: SharedModel
    winner: str  # the vote's value: model_a, model_b, tie, tie (bothbad)
    prompt: str | None  # the first user turn, when the voter agreed to show it
    voted_at: datetime

    @property
    def chosen(self) -> SharedModel | None:
        return {"model_a": self.model_a, "model_b": self.model_b}.get(self.winner)

    @property
    def other(self) -> SharedModel | None:
        return {"model_a": self.model_b, "model_b": self.model_a}.get(self.winner)

    @property
    def prompt_excerpt(self) -> str | None:
        if self.prompt is None:
            return None
        text = " ".join(self.prompt.split())
        if len(text) <= PROMPT_EXCERPT_CHARS:
            return text
        return text[: PROMPT_EXCERPT_CHARS - 1].rstrip() + "…"


def _shared(model) -> SharedModel:  # type: ignore[no-untyped-def]
    return SharedModel(slug=model.slug, name=model.display_name, organization=model.organization)


def share_outcome(*, token: str) -> SharedOutcome | None:
    """The outcome behind ``token``, or None for an unknown token (the page's 404)."""
    share = (
        BattleShare.objects.select_related("battle__model_a", "battle__model_b", "battle__vote")
        .filter(token=token)
        .first()
    )
    if share is None:
        return None
    battle = share.battle
    prompt = None
    if share.include_prompt:
        first = (
            BattleMessage.objects.filter(battle=battle, turn=0, superseded_at__isnull=True)
            .values_list("user_content", flat=True)
            .first()
        )
        prompt = first or None
    return SharedOutcome(
        token=share.token,
        model_a=_shared(battle.model_a),
        model_b=_shared(battle.model_b),
        winner=battle.vote.winner,
        prompt=prompt,
        voted_at=battle.vote.created_at,
    )


def share_headline(outcome: SharedOutcome) -> str:
    """The verdict in one sentence, as the page's title and the card's headline say it."""
    a, b = outcome.model_a.name, outcome.model_b.name
    chosen, other = outcome.chosen, outcome.other
    if chosen is not None and other is not None:
        return gettext("In a blind battle, I preferred %(chosen)s to %(other)s") % {
            "chosen": chosen.name,
            "other": other.name,
        }
    if outcome.winner == "tie":
        return gettext("In a blind battle, %(a)s and %(b)s tied") % {"a": a, "b": b}
    return gettext("In a blind battle, neither %(a)s nor %(b)s convinced me") % {"a": a, "b": b}
