"""Reads. Everything a view or a downstream app needs to know about battles and votes."""

from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from arena.models import ArenaModel, Battle, BattleMessage, TermsAcceptance, Vote


def terms_accepted(*, voter_id: str) -> bool:
    return TermsAcceptance.objects.filter(
        voter_id=voter_id, terms_version=settings.ARENA_TERMS_VERSION
    ).exists()


def battle_current_messages(*, battle: Battle) -> list[BattleMessage]:
    return list(battle.messages.filter(superseded_at__isnull=True).order_by("turn", "side"))


def model_public_dict(model: ArenaModel) -> dict[str, Any]:
    return {
        "slug": model.slug,
        "name": model.display_name,
        "organization": model.organization,
        "license": model.license,
    }


def battle_payload(*, battle: Battle) -> dict[str, Any]:
    """What a client is shown of a battle.

    Model identities are included only once the battle is voted on, or in named mode where the
    visitor chose the models; nothing else in the payload can identify a model.
    """
    turns: dict[int, dict[str, Any]] = {}
    for message in battle_current_messages(battle=battle):
        turn = turns.setdefault(message.turn, {"index": message.turn, "prompt": ""})
        turn["prompt"] = message.user_content
        turn[message.side] = {
            "content": message.content,
            "status": message.status,
            "error": bool(message.error),
        }
    vote = Vote.objects.filter(battle=battle).only("winner").first()
    payload: dict[str, Any] = {
        "id": str(battle.id),
        "mode": battle.mode,
        "source": battle.source,
        "state": battle.state,
        "votable": battle.state == Battle.State.READY,
        "turns": [turns[k] for k in sorted(turns)],
        "vote": {"winner": vote.winner} if vote else None,
        "models": None,
    }
    if vote is not None or battle.mode == Battle.Mode.NAMED:
        payload["models"] = {
            "a": model_public_dict(battle.model_a),
            "b": model_public_dict(battle.model_b),
        }
    return payload


def votes_for_rating(*, anonymous_only: bool = True, include_flagged: bool = False) -> QuerySet:
    """The votes the leaderboard is computed from: anonymous, unflagged by default.

    Rows carry the battle's model slugs, the winner, the style counts and the prompt category
    so the rating side never touches battle internals.
    """
    qs = Vote.objects.all()
    if anonymous_only:
        qs = qs.filter(battle__mode=Battle.Mode.ANONYMOUS)
    if not include_flagged:
        qs = qs.filter(flagged=False)
    return qs.order_by("id").values(
        "id",
        "winner",
        "style",
        "created_at",
        "battle__model_a__slug",
        "battle__model_b__slug",
        "battle__prompt__category",
        "battle__prompt__language",
    )
