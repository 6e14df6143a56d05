"""Reads of the red-teaming play side: the challenges a player may pick."""

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
