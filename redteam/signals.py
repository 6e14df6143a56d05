"""The red-teaming arena's signals and receivers.

``attempt_ended`` is sent by the play side once an attempt's end (succeeded, surrendered,
expired) is committed, with ``attempt_id`` and ``state``: a refit or an export can listen
without the play side importing them. ``refit_after_attempt_end`` (a ``post_save`` receiver
connected in ``RedteamConfig.ready``) queues a robustness refit after the transaction commits.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from redteam.models import Attempt
from redteam.tasks import refit_enqueue

attempt_ended = Signal()


def refit_after_attempt_end(sender: type[Attempt], instance: Attempt, **kwargs: Any) -> None:
    if instance.state != Attempt.State.OPEN:
        refit_enqueue()
