"""The red-team visitor API: the players' board opt-in, ``POST /api/redteam/profile``."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.translation import gettext
from ninja import Field, Router, Schema
from ninja.decorators import decorate_view
from pydantic import ConfigDict

from arena.api import session_identity
from arena.errors import ArenaError, ErrorCode
from arena.visitor_api import BODY_ERRORS, CSRF, ErrorOut, checked, limited
from redteam.profiles import PSEUDONYM_MAX, PSEUDONYM_MIN, player_profile_set

router = Router(tags=["redteam"])


class ProfileIn(Schema):
    # As the visitor API's bodies: unknown keys ignored, each value checked here and named.
    model_config = ConfigDict(
        extra="ignore", json_schema_extra={"required": ["pseudonym", "on_board"]}
    )
    pseudonym: Any = Field(
        None,
        description="The name shown on the players' board; another player's is refused.",
        json_schema_extra={
            "type": "string",
            "minLength": PSEUDONYM_MIN,
            "maxLength": PSEUDONYM_MAX,
        },
    )
    on_board: Any = Field(
        None,
        description="Whether the player appears on the players' board.",
        json_schema_extra={"type": "boolean"},
    )


class ProfileOut(Schema):
    pseudonym: str
    on_board: bool


@router.post(
    "/redteam/profile",
    response={200: ProfileOut, **BODY_ERRORS, 429: ErrorOut},
    summary="Set the red-team player's pseudonym and board opt-in",
    operation_id="redteamProfileSet",
    openapi_extra=CSRF,
)
@decorate_view(checked(body=True), limited("redteam.profile", "ARENA_RATELIMIT_VOTES"))
def profile_set(request: HttpRequest, payload: ProfileIn) -> ProfileOut:
    """Set the current visitor's pseudonym and whether they appear on the players' board. A
    400 invalid (field pseudonym): not 3 to 40 characters, or another player's."""
    if not isinstance(payload.pseudonym, str):
        raise ArenaError(
            ErrorCode.INVALID, gettext("Send the pseudonym as a string."), field="pseudonym"
        )
    on_board = payload.on_board
    if not isinstance(on_board, bool):
        raise ArenaError(
            ErrorCode.INVALID, gettext("Send on_board as true or false."), field="on_board"
        )
    _, player_id = session_identity(request)
    profile = player_profile_set(
        player_id=player_id, pseudonym=payload.pseudonym, on_board=on_board
    )
    return ProfileOut(pseudonym=profile.pseudonym, on_board=profile.on_board)
