"""Staff administration: providers and models editable; battles and votes read-only."""

from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.db.models import Q
from django.http import HttpRequest, HttpResponse

from arena.exports import FORMATS
from arena.leaks import IDENTITY_LEAK
from arena.live.breaker import provider_breaker_reset
from arena.models import (
    ApiToken,
    ArenaModel,
    Battle,
    BattleMessage,
    Completion,
    LiveLimits,
    Prompt,
    Provider,
    RefusedPrompt,
    TermsAcceptance,
    Vote,
    completion_turns_hash,
)
from arena.services.flags import ANOMALOUS_VOTER, votes_flag_clear
from arena.services.models import models_deactivate
from arena.tokens import token_revoke


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """Records of what happened: visible and searchable, never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin[Provider]):
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = [
        "name",
        "base_url",
        "api_key_env",
        "connect_timeout",
        "read_timeout",
        "breaker_failures",
        "breaker_open_until",
    ]
    search_fields = ["name", "base_url"]
    # The circuit breaker is set by live battles; staff only reset it.
    readonly_fields = ["breaker_failures", "breaker_open_until"]
    actions = ["reset_breaker"]

    @admin.action(description="Reset the circuit breaker of selected providers")
    def reset_breaker(self, request: HttpRequest, queryset: Any) -> None:
        count = provider_breaker_reset(provider_ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"Reset {count} circuit breaker(s).")


@admin.register(ArenaModel)
class ArenaModelAdmin(admin.ModelAdmin[ArenaModel]):
    list_display = [
        "slug",
        "display_name",
        "organization",
        "license",
        "parameter_size",
        "provider",
        "upstream_model_id",
        "sampling_weight",
        "is_active",
        "is_public",
    ]
    list_filter = ["is_active", "is_public", "provider", "organization", "outputs_reuse"]
    list_editable = ["sampling_weight", "is_active"]
    search_fields = ["slug", "display_name", "organization", "upstream_model_id"]
    prepopulated_fields = {"slug": ("display_name",)}
    actions = ["deactivate"]

    @admin.action(description="Deactivate selected models (they keep their history)")
    def deactivate(self, request: HttpRequest, queryset: Any) -> None:
        models_deactivate(model_ids=list(queryset.values_list("id", flat=True)))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A model with battles is deactivated, never deleted (the foreign keys also protect it).
        if obj is not None and Battle.objects.filter(Q(model_a=obj) | Q(model_b=obj)).exists():
            return False
        return super().has_delete_permission(request, obj)


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin[Prompt]):
    list_display = ["id", "__str__", "category", "language", "source", "created_at"]
    list_filter = ["category", "language", "source"]
    search_fields = ["turns", "external_id"]
    # Set by the live battle service from the first turn (arena.prompt_text), never by hand.
    readonly_fields = ["text_hash"]


class CompletionForm(forms.ModelForm[Completion]):
    """A completion's ``turns_hash`` follows its turns; a pool variant's text must be new."""

    class Meta:
        model = Completion
        fields = ["prompt", "model", "turns", "source"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        turns = cleaned.get("turns")
        if not isinstance(turns, list):
            return cleaned
        self.instance.turns_hash = completion_turns_hash([str(t) for t in turns])
        same = Completion.objects.filter(
            prompt=cleaned.get("prompt"),
            model=cleaned.get("model"),
            source=Completion.Source.POOL,
            turns_hash=self.instance.turns_hash,
        ).exclude(pk=self.instance.pk)
        if cleaned.get("source") == Completion.Source.POOL and same.exists():
            raise forms.ValidationError("The model already has this answer to this prompt.")
        return cleaned


@admin.register(Completion)
class CompletionAdmin(admin.ModelAdmin[Completion]):
    form = CompletionForm
    list_display = ["id", "model", "prompt", "source", "created_at"]
    list_filter = ["source", "model"]
    search_fields = ["model__slug", "turns"]
    raw_id_fields = ["prompt"]


MESSAGE_FIELDS = (
    "turn",
    "side",
    "status",
    "user_content",
    "content",
    "token_count",
    "time_to_first_token_ms",
    "latency_ms",
    "finish_reason",
    "error",
    "superseded_at",
)


class BattleMessageInline(admin.TabularInline[BattleMessage, Battle]):
    model = BattleMessage
    extra = 0
    can_delete = False
    fields = MESSAGE_FIELDS
    readonly_fields = MESSAGE_FIELDS

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Battle)
class BattleAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "mode", "source", "state", "model_a", "model_b"]
    list_filter = ["mode", "source", "state", "model_a", "model_b"]
    search_fields = ["id", "model_a__slug", "model_b__slug"]
    # The session's keyed hash links a battle to its visitor; staff have no use for it.
    exclude = ["session_hash"]
    date_hierarchy = "created_at"
    inlines = [BattleMessageInline]


@admin.register(Vote)
class VoteAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "winner",
        "battle",
        "voter_id",
        "user_agent_class",
        "flagged",
        "flags",
        "flags_cleared",
    ]
    list_filter = ["winner", "flagged", "user_agent_class", "battle__mode", "battle__source"]
    search_fields = ["battle__id", "voter_id", "battle__model_a__slug", "battle__model_b__slug"]
    date_hierarchy = "created_at"
    change_list_template = "arena/admin/vote_change_list.html"
    actions = ["clear_anomaly_flag", "clear_identity_leak_flag"]

    def has_flag_permission(self, request: HttpRequest) -> bool:
        """Clearing a flag is the one change staff make to a vote (``arena.change_vote``)."""
        return request.user.has_perm("arena.change_vote")

    def _clear(self, request: HttpRequest, queryset: Any, reason: str) -> None:
        changed = set(
            votes_flag_clear(vote_ids=queryset.values_list("pk", flat=True), reason=reason)
        )
        # Who cleared what stays in the admin's history of each vote.
        for vote in queryset.filter(pk__in=changed):
            self.log_change(request, vote, f"Cleared the {reason} flag.")
        self.message_user(request, f"{len(changed)} vote(s) cleared of {reason}.")

    @admin.action(description="Clear anomaly flag (anomalous_voter)", permissions=["flag"])
    def clear_anomaly_flag(self, request: HttpRequest, queryset: Any) -> None:
        self._clear(request, queryset, ANOMALOUS_VOTER)

    @admin.action(description="Clear identity leak flag (identity_leak)", permissions=["flag"])
    def clear_identity_leak_flag(self, request: HttpRequest, queryset: Any) -> None:
        self._clear(request, queryset, IDENTITY_LEAK)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Download links for the trainer formats (arena.exports), above the list.
        context = {**(extra_context or {}), "export_formats": FORMATS}
        return super().changelist_view(request, extra_context=context)


@admin.register(LiveLimits)
class LiveLimitsAdmin(admin.ModelAdmin[Any]):
    """One row of limits; a blank field falls back to its ARENA_LIVE_* setting."""

    list_display = [
        "__str__",
        "max_prompt_chars",
        "max_turns",
        "max_output_tokens",
        "max_concurrent_battles",
        "updated_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not LiveLimits.objects.exists()

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.pk = 1  # the singleton
        super().save_model(request, obj, form, change)


@admin.register(TermsAcceptance)
class TermsAcceptanceAdmin(ReadOnlyAdmin):
    list_display = ["voter_id", "terms_version", "accepted_at"]
    search_fields = ["voter_id"]


@admin.register(RefusedPrompt)
class RefusedPromptAdmin(ReadOnlyAdmin):
    """Live prompts the moderation hook refused (arena.live.moderation): hashes, not texts."""

    list_display = ["created_at", "checker", "reason", "prompt_chars", "prompt_sha256"]
    list_filter = ["checker"]
    search_fields = ["prompt_sha256", "session_hash", "ip_hash", "reason"]
    date_hierarchy = "created_at"


# --- API tokens (arena.tokens: the environment API's and the exports') ----------------------


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    """Tokens are created with ``manage.py api_token create`` (the one place a token is shown);
    here they are listed and revoked. The hash is never shown."""

    list_display = ["name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix"]
    fields = ["name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    @admin.action(description="Revoke selected API tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        count = sum(token_revoke(token=token) for token in queryset)
        self.message_user(request, f"Revoked {count} API token(s).")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a token with runs is protected; revoking is the way
