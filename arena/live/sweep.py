"""The sweep of live battles a stopped server left streaming (run by a Celery beat task,
``arena.tasks.live_battles_sweep``)."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from arena.models import Battle, BattleMessage


def live_battles_sweep(*, now: datetime | None = None) -> int:
    """Settle battles left streaming by a server that stopped mid-turn (a crash, a restart, a
    turn whose end could not be saved): their unfinished answers become aborted, keeping the
    partial text, and the battle aborted, so the visitor can regenerate or start over.

    Only battles older than the longest an answer may take (``ARENA_LIVE_ANSWER_SECONDS``) and
    a minute's margin: a live server has ended every turn by then. Returns how many it settled.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.ARENA_LIVE_ANSWER_SECONDS + 60)
    settled = 0
    stale = Battle.objects.filter(state=Battle.State.STREAMING, updated_at__lt=cutoff)
    for battle_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            battle = (
                Battle.objects.select_for_update()
                .filter(pk=battle_id, state=Battle.State.STREAMING, updated_at__lt=cutoff)
                .first()
            )
            if battle is None:  # its turn ended meanwhile
                continue
            BattleMessage.objects.filter(
                battle=battle,
                superseded_at__isnull=True,
                status=BattleMessage.Status.STREAMING,
            ).update(
                status=BattleMessage.Status.ABORTED,
                error="The server stopped before this answer ended.",
            )
            battle.state = Battle.State.ABORTED
            battle.save(update_fields=["state", "updated_at"])
            settled += 1
    return settled
