"""The red-teaming admin: challenges written by staff, attempts kept as the record (read-only).

The challenge's own page shows its secret (staff set it there); the attempts' pages show their
texts with the secret redacted in every form the judge counts (``redteam.judges.secret_redact``),
as the export does, so that reading the record does not hand the secret on.
"""

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from redteam.judges import Redactable, secret_redact, secret_redact_json
from redteam.models import Attempt, AttemptTurn, Challenge, PlayerProfile
from redteam.selectors import challenge_secret


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


def _redacted_json(value: Redactable, challenge: Challenge) -> str:
    if value is None:
        return "-"
    redacted = secret_redact_json(value, challenge_secret(challenge))
    return json.dumps(redacted, ensure_ascii=False, indent=1)


class AttemptTurnInline(admin.TabularInline[AttemptTurn, Attempt]):
    model = AttemptTurn
    extra = 0
    can_delete = False
    fields = ("turn", "prompt", "answer", "status", "judged", "failure", "latency_ms")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).select_related("attempt__challenge")

    @admin.display(description="user content")
    def prompt(self, obj: AttemptTurn) -> str:
        return secret_redact(obj.user_content, challenge_secret(obj.attempt.challenge))

    @admin.display(description="content")
    def answer(self, obj: AttemptTurn) -> str:
        return secret_redact(obj.content, challenge_secret(obj.attempt.challenge))

    @admin.display(description="verdict")
    def judged(self, obj: AttemptTurn) -> str:
        return _redacted_json(obj.verdict, obj.attempt.challenge)

    @admin.display(description="error")
    def failure(self, obj: AttemptTurn) -> str:
        return secret_redact(obj.error, challenge_secret(obj.attempt.challenge))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# Every field of an attempt, read-only; the judge's reason and evidence may quote the secret, so
# they are shown redacted in their place.
_REDACTED = {"verdict_reason": "reason", "evidence": "evidence_redacted"}
_ATTEMPT_FIELDS = tuple(_REDACTED.get(f.name, f.name) for f in Attempt._meta.fields)


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin[Attempt]):
    list_display = ("id", "challenge", "model", "state", "flagged", "created_at", "ended_at")
    list_filter = ("state", "flagged", "challenge")
    search_fields = ("id", "player_id")
    date_hierarchy = "created_at"
    inlines = (AttemptTurnInline,)
    list_select_related = ("challenge", "model")
    fields = _ATTEMPT_FIELDS
    readonly_fields = _ATTEMPT_FIELDS

    @admin.display(description="verdict reason")
    def reason(self, obj: Attempt) -> str:
        return secret_redact(obj.verdict_reason, challenge_secret(obj.challenge))

    @admin.display(description="evidence")
    def evidence_redacted(self, obj: Attempt) -> str:
        return _redacted_json(obj.evidence, obj.challenge)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The record is read-only; viewing needs only the view permission.
        return False


@admin.register(PlayerProfile)
class PlayerProfileAdmin(admin.ModelAdmin[PlayerProfile]):
    list_display = ("pseudonym", "player_id", "on_board", "created_at")
    search_fields = ("pseudonym", "player_id")
