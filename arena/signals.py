"""The signal the arena sends for apps downstream of it to listen to.

Sent from ``arena.services.votes.vote_record`` once the vote's transaction commits; the ratings
app connects its receiver in ``RatingsConfig.ready``, so notifying it needs no import of it here.
"""

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.dispatch import Signal


def after_commit(work: Callable[[], object]) -> None:
    """Run ``work`` once the current transaction commits (at once outside one), where its
    failure is logged with its traceback and never raised: what was committed stays answered
    as committed (a vote stays recorded, its daily cap stays taken)."""
    transaction.on_commit(work, robust=True)


def send_after_commit(signal: Signal, *, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` once the current transaction commits, to every receiver even when one
    raises: ``Signal.send_robust`` logs each receiver's failure with its traceback
    (``django.dispatch``), and a receiver's bug never changes the answer to the committed
    write."""
    after_commit(lambda: signal.send_robust(sender=sender, **kwargs))


# Sent after the transaction that recorded a vote commits. kwargs: vote_id, battle_id, source
# (the battle's ``Battle.Source``: receivers tell an environment battle's vote without a query).
vote_recorded = Signal()

# Sent after a transaction that changed votes' flags commits (arena.services.flags: the anomaly
# run set them, or staff cleared them), so the leaderboard is refitted. kwargs: vote_ids, reason.
vote_flags_changed = Signal()

# Sent after the transaction that changed or cleared, after its battle's vote, a reaction given
# before the names were shown: such a reaction stops counting (``Reaction.after_reveal``), which
# may change the verdict the ratings read with RATINGS_COUNT_REACTIONS. kwargs: battle_id.
counted_reaction_changed = Signal()

# Sent after the transaction that created a submission of a run with ``reward_model`` commits
# (environment.runs.env_submission_create), so that the rating side's reward model scores its
# completions at once. kwargs: submission_id, run_id.
env_submission_created = Signal()
