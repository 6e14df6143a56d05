"""A player's opt-in to the players' board under a pseudonym."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils.translation import gettext

from arena.errors import ArenaError, ErrorCode
from redteam.models import PlayerProfile

PSEUDONYM_MIN = 3
PSEUDONYM_MAX = 40


def player_profile_set(*, player_id: str, pseudonym: str, on_board: bool) -> PlayerProfile:
    """Create or update the player's profile; a pseudonym another player holds is refused."""
    pseudonym = pseudonym.strip()
    if not PSEUDONYM_MIN <= len(pseudonym) <= PSEUDONYM_MAX:
        raise ArenaError(
            ErrorCode.INVALID,
            gettext("The pseudonym must be %(low)s to %(high)s characters.")
            % {"low": PSEUDONYM_MIN, "high": PSEUDONYM_MAX},
            field="pseudonym",
        )
    if PlayerProfile.objects.filter(pseudonym=pseudonym).exclude(player_id=player_id).exists():
        raise ArenaError(ErrorCode.INVALID, gettext("That pseudonym is taken."), field="pseudonym")
    try:
        with transaction.atomic():
            profile, _ = PlayerProfile.objects.update_or_create(
                player_id=player_id, defaults={"pseudonym": pseudonym, "on_board": on_board}
            )
    except IntegrityError as exc:
        raise ArenaError(
            ErrorCode.INVALID, gettext("That pseudonym is taken."), field="pseudonym"
        ) from exc
    return profile
