"""The red-team visitor API: the players' board opt-in, ``POST /api/redteam/profile``."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema

from arena.api import session_identity
from redteam.profiles import player_profile_set

router = Router(tags=["redteam"])


class ProfileIn(Schema):
    pseudonym: str
    on_board: bool


class ProfileOut(Schema):
    pseudonym: str
    on_board: bool


@router.post("/redteam/profile", response=ProfileOut)
def profile_set(request: HttpRequest, payload: ProfileIn) -> ProfileOut:
    """Set the current visitor's pseudonym and whether they appear on the players' board."""
    _, player_id = session_identity(request)
    profile = player_profile_set(
        player_id=player_id, pseudonym=payload.pseudonym, on_board=payload.on_board
    )
    return ProfileOut(pseudonym=profile.pseudonym, on_board=profile.on_board)
