"""Sharing a battle's outcome: the voter makes a public page for it, with or without the prompt."""

import secrets

from django.db import IntegrityError, transaction

from arena.errors import ArenaError, ErrorCode
from arena.models import BattleShare, Vote
from arena.selectors import battle_for_session

SHARE_TOKEN_BYTES = 12  # 16 URL-safe characters: not guessable, short enough to paste


def share_create(*, battle_id: object, session_key: str, include_prompt: object) -> BattleShare:
    """The share of this session's voted battle for this choice, made once and then reused.

    Only the session the battle was served to may share it, and only after its vote: before
    the vote the names are secret. ``include_prompt`` must be a JSON boolean: the prompt is the
    visitor's own text and is published only on an explicit yes.
    """
    if not isinstance(include_prompt, bool):
        raise ArenaError(
            ErrorCode.INVALID, "include_prompt must be true or false.", field="include_prompt"
        )
    battle = battle_for_session(battle_id=battle_id, session_key=session_key)
    if not Vote.objects.filter(battle=battle).exists():
        raise ArenaError(
            ErrorCode.NOT_VOTABLE,
            "Vote first: a battle's outcome can be shared once it has a vote.",
            status=409,
            field="battle_id",
        )
    existing = BattleShare.objects.filter(battle=battle, include_prompt=include_prompt).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return BattleShare.objects.create(
                token=secrets.token_urlsafe(SHARE_TOKEN_BYTES),
                battle=battle,
                include_prompt=include_prompt,
            )
    except IntegrityError:  # the same visitor's second click won the race: theirs is the share
        return BattleShare.objects.get(battle=battle, include_prompt=include_prompt)
