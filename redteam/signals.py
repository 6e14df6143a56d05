"""An attempt that ends queues a robustness refit after its transaction commits."""

from __future__ import annotations

from typing import Any

from redteam.models import Attempt
from redteam.tasks import refit_enqueue


def refit_after_attempt_end(sender: type[Attempt], instance: Attempt, **kwargs: Any) -> None:
    if instance.state != Attempt.State.OPEN:
        refit_enqueue()
