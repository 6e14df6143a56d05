"""Staff administration of leaderboard snapshots (read-only, plus "Recompute now") and of the
reward model's snapshots (read-only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse

from arena.admin import ReadOnlyAdmin, model_list_column_register
from arena.models import ArenaModel
from ratings.models import LeaderboardSnapshot, RewardModelSnapshot
from ratings.selectors import models_leaderboard_status, snapshot_latest
from ratings.tasks import snapshot_refresh_enqueue


@admin.register(LeaderboardSnapshot)
class LeaderboardSnapshotAdmin(ReadOnlyAdmin):
    """Snapshots are records of runs: visible, never edited or deleted here."""

    list_display = ["id", "created_at", "vote_high_water", "n_votes", "duration_seconds"]
    readonly_fields = [
        "created_at",
        "vote_high_water",
        "n_votes",
        "params",
        "params_digest",
        "duration_seconds",
        "payload",
    ]
    change_list_template = "ratings/admin/snapshot_change_list.html"
    actions = ["recompute_now"]

    def get_urls(self) -> list[Any]:
        recompute = path(
            "recompute/",
            self.admin_site.admin_view(self.recompute_view),
            name="ratings_leaderboardsnapshot_recompute",
        )
        return [recompute, *super().get_urls()]

    def _enqueue(self, request: HttpRequest) -> None:
        snapshot_refresh_enqueue(force=True)
        self.message_user(
            request,
            "A new leaderboard snapshot has been queued; it appears here when the run finishes.",
            messages.SUCCESS,
        )

    def recompute_view(self, request: HttpRequest) -> HttpResponseRedirect:
        changelist = reverse("admin:ratings_leaderboardsnapshot_changelist")
        if request.method != "POST":
            return HttpResponseRedirect(changelist)
        if not request.user.is_staff:  # admin_view already requires staff; belt and braces
            return HttpResponseRedirect(changelist)
        self._enqueue(request)
        return HttpResponseRedirect(changelist)

    @admin.action(description="Recompute now (write a new snapshot)")
    def recompute_now(self, request: HttpRequest, queryset: Any) -> None:
        self._enqueue(request)


@admin.register(RewardModelSnapshot)
class RewardModelSnapshotAdmin(ReadOnlyAdmin):
    """The reward model's fits: their votes, penalty and held-out figures (weights not shown)."""

    list_display = ["id", "created_at", "vote_high_water", "n_votes", "l2", "duration_seconds"]
    readonly_fields = [
        "created_at",
        "vote_high_water",
        "n_votes",
        "l2",
        "heldout",
        "duration_seconds",
    ]
    exclude = ["weights", "spec"]


# --- The arena's model list: each model's leaderboard status ---------------------------------


def leaderboard_column(request: HttpRequest) -> Callable[[ArenaModel], str]:
    """The model list's "Leaderboard" column: the latest snapshot, read once for the page."""
    statuses: dict[str, str] | None = None

    def leaderboard(obj: ArenaModel) -> str:
        nonlocal statuses
        if statuses is None:
            statuses = models_leaderboard_status(snapshot_latest())
        return statuses.get(obj.slug, "not yet rated")

    leaderboard.short_description = "Leaderboard"  # type: ignore[attr-defined]
    return leaderboard


model_list_column_register("leaderboard", leaderboard_column)
