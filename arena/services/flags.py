"""Setting and clearing the flags that keep votes out of the leaderboard and the exports.

A flag never deletes a vote: it adds a reason to ``Vote.flags`` and sets ``Vote.flagged``. A
reason staff cleared goes to ``Vote.flags_cleared`` and is never set on that vote again, so a
later run of the check that raised it (e.g. ``manage.py flag_voters``) respects the decision.
After commit, ``arena.signals.vote_flags_changed`` tells downstream apps (the leaderboard).
"""

from collections.abc import Iterable

from django.db import transaction

from arena.models import Battle, Vote
from arena.signals import send_after_commit, vote_flags_changed

ANOMALOUS_VOTER = "anomalous_voter"
# Set and lifted by every leaderboard refit (``ratings.cohorts``): a burst of new sources'
# votes that disagrees with the rest of the arena, held out while it does.
COHORT_BURST = "cohort_burst"


def _announce(vote_ids: list[int], reason: str, *, announce: bool = True) -> None:
    if vote_ids and announce:
        send_after_commit(vote_flags_changed, sender=Vote, vote_ids=vote_ids, reason=reason)


def votes_flag(*, vote_ids: Iterable[int], reason: str, announce: bool = True) -> list[int]:
    """Add ``reason`` to these votes' flags, except where it is set already or staff cleared it.

    Returns the ids of the votes that changed (idempotent: a rerun changes none). ``announce``
    False: no ``vote_flags_changed`` (the caller is the refit that reads the flags next)."""
    ids = sorted(set(vote_ids))
    changed: list[Vote] = []
    with transaction.atomic():
        for vote in Vote.objects.select_for_update().filter(pk__in=ids).order_by("pk"):
            flags = list(vote.flags or [])
            if reason in flags or reason in (vote.flags_cleared or []):
                continue
            vote.flags = [*flags, reason]
            vote.flagged = True
            changed.append(vote)
        Vote.objects.bulk_update(changed, ["flags", "flagged"], batch_size=500)
        changed_ids = [vote.pk for vote in changed]
        _announce(changed_ids, reason, announce=announce)
    return changed_ids


def votes_flag_lift(*, vote_ids: Iterable[int], reason: str, announce: bool = True) -> list[int]:
    """Take ``reason`` off these votes because the check that set it no longer finds it (not
    staff's decision: it may be set again). A vote with no reason left counts again.

    Returns the ids of the votes that changed."""
    ids = sorted(set(vote_ids))
    changed: list[Vote] = []
    with transaction.atomic():
        for vote in Vote.objects.select_for_update().filter(pk__in=ids).order_by("pk"):
            flags = list(vote.flags or [])
            if reason not in flags:
                continue
            vote.flags = [flag for flag in flags if flag != reason]
            vote.flagged = bool(vote.flags)
            changed.append(vote)
        Vote.objects.bulk_update(changed, ["flags", "flagged"], batch_size=500)
        changed_ids = [vote.pk for vote in changed]
        _announce(changed_ids, reason, announce=announce)
    return changed_ids


def votes_flag_clear(*, vote_ids: Iterable[int], reason: str) -> list[int]:
    """Staff's decision that ``reason`` does not hold for these votes: it leaves their flags,
    joins ``flags_cleared`` (never set again), and a vote with no reason left counts again.

    Returns the ids of the votes that changed."""
    ids = sorted(set(vote_ids))
    changed: list[Vote] = []
    with transaction.atomic():
        for vote in Vote.objects.select_for_update().filter(pk__in=ids).order_by("pk"):
            flags = list(vote.flags or [])
            cleared = list(vote.flags_cleared or [])
            if reason not in flags and reason in cleared:
                continue
            vote.flags = [flag for flag in flags if flag != reason]
            vote.flags_cleared = cleared if reason in cleared else [*cleared, reason]
            vote.flagged = bool(vote.flags)
            changed.append(vote)
        Vote.objects.bulk_update(changed, ["flags", "flags_cleared", "flagged"], batch_size=500)
        changed_ids = [vote.pk for vote in changed]
        _announce(changed_ids, reason)
    return changed_ids


def voters_flag(*, voter_ids: Iterable[str], reason: str) -> list[int]:
    """Flag every vote of these voters with ``reason`` (environment battles' votes aside: they
    judge a trainer's completions, not models); returns the ids of the votes that changed."""
    ids = (
        Vote.objects.filter(voter_id__in=list(voter_ids))
        .exclude(battle__source=Battle.Source.ENV)
        .values_list("pk", flat=True)
    )
    return votes_flag(vote_ids=list(ids), reason=reason)
