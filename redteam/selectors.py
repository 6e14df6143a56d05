"""Reads of the red-teaming play side: the challenges a player may pick, and the secret a
challenge's attempts must never show outside the player's own page."""

from redteam.models import Challenge

_DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def challenges_active() -> list[Challenge]:
    """The challenges players see, easiest first, then by title."""
    return sorted(
        Challenge.objects.filter(is_active=True),
        key=lambda c: (_DIFFICULTY_ORDER.get(c.difficulty, len(_DIFFICULTY_ORDER)), c.title),
    )


def challenge_active(*, slug: str) -> Challenge | None:
    return Challenge.objects.filter(slug=slug, is_active=True).first()


def challenge_secret(challenge: Challenge) -> str:
    """The secret to redact from the challenge's attempts wherever they leave the player's own
    page (``redteam.judges.secret_redact``); "" for the kinds that plant none."""
    return challenge.target if challenge.kind == Challenge.Kind.SECRET else ""
