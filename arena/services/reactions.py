"""Reactions: a visitor's thumbs up or down on one side's answers, with reason tags."""

from django.db import transaction
from django.utils.translation import gettext_noop

from arena.errors import ArenaError, ErrorCode
from arena.models import Battle, Reaction, ReactionTag, Vote
from arena.selectors import battle_for_session
from arena.signals import counted_reaction_changed, send_after_commit

# The reasons ComparIA offers with a reaction: what a new arena starts with (the migration that
# made the table wrote the same list), and what ``reaction_tags_seed`` restores.
DEFAULT_REACTION_TAGS = (
    ("useful", gettext_noop("Useful"), "up"),
    ("complete", gettext_noop("Complete"), "up"),
    ("creative", gettext_noop("Creative"), "up"),
    ("clear-formatting", gettext_noop("Clear formatting"), "up"),
    ("incorrect", gettext_noop("Incorrect"), "down"),
    ("superficial", gettext_noop("Superficial"), "down"),
    ("instructions-not-followed", gettext_noop("Instructions not followed"), "down"),
)

# The battle states whose answers are there to judge.
REACTABLE_STATES = (Battle.State.READY, Battle.State.VOTED)
MAX_TAGS = 8


def _tags_valid(*, tags: object, liked: bool) -> list[str]:
    """The tag slugs, each an active tag of the reaction's polarity, in the order given."""
    if tags is None:
        return []
    if not isinstance(tags, list):
        raise ArenaError(ErrorCode.INVALID, "tags must be a list of tag names.", field="tags")
    if len(tags) > MAX_TAGS:
        raise ArenaError(ErrorCode.INVALID, f"At most {MAX_TAGS} tags per reaction.", field="tags")
    polarity = ReactionTag.Polarity.UP if liked else ReactionTag.Polarity.DOWN
    allowed = set(
        ReactionTag.objects.filter(is_active=True, polarity=polarity).values_list("slug", flat=True)
    )
    chosen: list[str] = []
    for index, tag in enumerate(tags):
        if not isinstance(tag, str) or tag not in allowed:
            what = "a thumbs up" if liked else "a thumbs down"
            raise ArenaError(
                ErrorCode.INVALID,
                f"Unknown tag for {what}: {str(tag)[:40]!r}.",
                field=f"tags.{index}",
            )
        if tag not in chosen:
            chosen.append(tag)
    return chosen


def reaction_set(
    *, battle_id: object, session_key: str, side: object, liked: object, tags: object = None
) -> Reaction | None:
    """Set (or with ``liked`` None, clear) this session's reaction on one side of its battle.

    ``side`` is "a" or "b"; ``liked`` true, false or null; ``tags`` active tag slugs of the
    reaction's polarity. Only the session the battle was served to may react, and only once
    both answers are there (a ready or voted battle). Returns the reaction, or None once
    cleared.
    """
    if side not in ("a", "b"):
        raise ArenaError(ErrorCode.INVALID, 'side must be "a" or "b".', field="side")
    if liked is not None and not isinstance(liked, bool):
        raise ArenaError(ErrorCode.INVALID, "liked must be true, false or null.", field="liked")
    battle = battle_for_session(battle_id=battle_id, session_key=session_key)
    if battle.state not in REACTABLE_STATES:
        raise ArenaError(
            ErrorCode.NOT_VOTABLE,
            "The answers are not complete yet: react once both have arrived.",
            status=409,
            field="battle_id",
        )
    chosen = None if liked is None else _tags_valid(tags=tags, liked=liked)
    with transaction.atomic():
        voted = Vote.objects.filter(battle=battle).exists()
        counted = Reaction.objects.filter(battle=battle, side=side, after_reveal=False)
        if voted and counted.exists():
            # The reaction the verdict may have read stops counting: say so once committed.
            send_after_commit(counted_reaction_changed, sender=Reaction, battle_id=battle.pk)
        if liked is None:
            Reaction.objects.filter(battle=battle, side=side).delete()
            return None
        reaction, _ = Reaction.objects.update_or_create(
            battle=battle,
            side=side,
            defaults={"liked": liked, "tags": chosen, "after_reveal": voted},
        )
    return reaction


def reaction_tags_seed() -> int:
    """Create the default tags that are missing (an existing tag, edited or retired by staff,
    is left as it is); the number created."""
    created = 0
    for position, (slug, label, polarity) in enumerate(DEFAULT_REACTION_TAGS):
        _, made = ReactionTag.objects.get_or_create(
            slug=slug, defaults={"label": label, "polarity": polarity, "position": position}
        )
        created += made
    return created
