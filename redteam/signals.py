"""What the red-teaming play side tells the rest of the project, after commit.

``attempt_ended`` is sent once an attempt's end (succeeded, surrendered, expired) is committed,
with ``attempt_id`` and ``state``: a robustness refit or an export can listen without the play
side importing them.
"""

from django.dispatch import Signal

attempt_ended = Signal()
