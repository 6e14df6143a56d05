"""The environment API's runs in the admin: state and counts; staff may close one."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from arena.admin import ReadOnlyAdmin
from environment.models import EnvRun
from environment.outbound import url_shown
from environment.runs import env_run_close
from environment.selectors import env_run_counts


@admin.register(EnvRun)
class EnvRunAdmin(ReadOnlyAdmin):
    """A trainer's runs: state and counts; staff may close one (it stops being served)."""

    list_display = [
        "name",
        "token",
        "state",
        "votes_per_completion",
        "share",
        "counts",
        "created_at",
        "touched_at",
        "closed_at",
        "closed_reason",
    ]
    list_filter = ["state", "closed_reason", "webhook_status"]
    search_fields = ["name", "id"]
    # The URL is shown through webhook (its userinfo, which older rows may hold, masked).
    exclude = ["webhook_secret", "webhook_url"]
    readonly_fields = ["webhook", "webhook_status", "webhook_error", "webhook_attempted_at"]
    actions = ["close"]

    @admin.display(description="webhook URL")
    def webhook(self, obj: EnvRun) -> str:
        return url_shown(obj.webhook_url)

    @admin.display(
        description="submissions / completions (pending, complete, expired, cancelled) / votes"
    )
    def counts(self, obj: EnvRun) -> str:
        c = env_run_counts(run=obj)
        return (
            f"{c['submissions']} / {c['completions']} "
            f"({c['pending']}, {c['complete']}, {c['expired']}, {c['cancelled']}) / {c['votes']}"
        )

    @admin.action(description="Close selected runs (stop serving their battles)")
    def close(self, request: HttpRequest, queryset: Any) -> None:
        for run in queryset:
            env_run_close(run=run, reason=EnvRun.ClosedReason.STAFF)
        self.message_user(request, f"Closed {len(queryset)} run(s).")
