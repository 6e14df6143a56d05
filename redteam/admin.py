"""The red-teaming admin: challenges written by staff, attempts kept as the record (read-only)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from redteam.models import Attempt, AttemptTurn, Challenge, PlayerProfile


@admin.register(Challenge)
class ChallengeAdmin(admin.ModelAdmin[Challenge]):
    list_display = ("title", "slug", "kind", "difficulty", "is_active", "max_turns")
    list_filter = ("kind", "difficulty", "is_active")
    search_fields = ("title", "slug", "rule")
    prepopulated_fields = {"slug": ("title",)}
    fieldsets = (
        (None, {"fields": ("title", "slug", "rule", "kind", "difficulty", "is_active")}),
        (
            "What the model is told",
            {
                "fields": ("system_prompt",),
                "description": "Sent before the player's turns, after the model's own system "
                "prompt. For <em>Reveal the secret</em>, write {secret} where the secret goes.",
            },
        ),
        (
            "Say the phrase / Reveal the secret",
            {
                "fields": ("target",),
                "description": "<em>Say the phrase</em>: the phrase; it matches whole words "
                "in order, whatever the case, spacing and punctuation. <em>Reveal the "
                "secret</em>: the secret; it matches plainly, spelled out with separators, "
                "reversed or in base64, and never when the player typed it first.",
            },
        ),
        (
            "A judge model decides",
            {
                "fields": ("judge_model", "judge_rubric"),
                "description": "The judge (a live model, never drawn against its own "
                "challenge) answers yes or no to the rubric about the conversation after each "
                "answer; yes ends the attempt as a success.",
            },
        ),
        ("Limits", {"fields": ("max_turns", "time_limit_seconds")}),
    )


class AttemptTurnInline(admin.TabularInline[AttemptTurn, Attempt]):
    model = AttemptTurn
    extra = 0
    can_delete = False
    fields = ("turn", "user_content", "content", "status", "verdict", "error", "latency_ms")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin[Attempt]):
    list_display = ("id", "challenge", "model", "state", "flagged", "created_at", "ended_at")
    list_filter = ("state", "flagged", "challenge")
    search_fields = ("id", "player_id")
    date_hierarchy = "created_at"
    inlines = (AttemptTurnInline,)
    list_select_related = ("challenge", "model")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Attempt._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The record is read-only; viewing needs only the view permission.
        return False


@admin.register(PlayerProfile)
class PlayerProfileAdmin(admin.ModelAdmin[PlayerProfile]):
    list_display = ("pseudonym", "player_id", "on_board", "created_at")
    search_fields = ("pseudonym", "player_id")
