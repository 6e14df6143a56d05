"""Staff administration: providers and models editable; battles and votes read-only.

Why one module: Django's admin looks for an app's registrations in ``admin.py``, and each one
here is a few declarations around the services it calls (a model's standing, a provider's
breaker, a vote's flags); split by model, the pieces would still share the read-only base and
the model list's columns, and a reader would look for them in one place first.
"""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince

from arena.exports import FORMATS
from arena.leaks import IDENTITY_LEAK
from arena.live.breaker import provider_breaker_reset
from arena.models import (
    ENV_VAR_NAME,
    STATUS_REASON_MAX,
    ApiToken,
    ArenaModel,
    Battle,
    BattleMessage,
    Completion,
    LiveLimits,
    Prompt,
    Provider,
    Reaction,
    ReactionTag,
    RefusedPrompt,
    TermsAcceptance,
    Vote,
    completion_turns_hash,
)
from arena.selectors import models_with_health, provider_breaker_state
from arena.services.flags import ANOMALOUS_VOTER, votes_flag_clear
from arena.services.models import model_reactivate, model_retire, model_visibility_set
from arena.services.providers import provider_connection_test, provider_key_problem
from arena.tokens import token_revoke


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """Records of what happened: visible and searchable, never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- Provider checks: the key variable must be set; "Test connection" -----------------------


class ProviderAdminForm(forms.ModelForm[Provider]):
    """Refuses a key variable that is not set in this server's environment
    (``arena.services.providers.provider_key_problem``)."""

    class Meta:
        model = Provider
        # The one field checked here; ``ProviderAdmin.fields`` lists the form's fields.
        fields = ["api_key_env"]

    def clean_api_key_env(self) -> str:
        name = str(self.cleaned_data.get("api_key_env") or "")
        try:
            ENV_VAR_NAME(name)
        except forms.ValidationError:
            return name  # not a variable name: the model's validator says so
        problem = provider_key_problem(api_key_env=name)
        if problem:
            raise forms.ValidationError(problem, code="api_key_env_unset")
        return name


class ProviderChecksAdmin(admin.ModelAdmin[Provider]):
    """The provider admin's "Test connection": an action on the list and a button on a
    provider's page (``templates/arena/admin/provider_change_form.html``)."""

    change_form_template = "arena/admin/provider_change_form.html"

    def get_urls(self) -> list[Any]:
        test = path(
            "<int:provider_id>/test-connection/",
            self.admin_site.admin_view(self.test_connection_view),
            name="arena_provider_test_connection",
        )
        return [test, *super().get_urls()]

    def _report(self, request: HttpRequest, provider: Provider) -> None:
        check = provider_connection_test(provider=provider)
        self.message_user(request, check.message, messages.SUCCESS if check.ok else messages.ERROR)

    def test_connection_view(self, request: HttpRequest, provider_id: int) -> HttpResponseRedirect:
        page = reverse("admin:arena_provider_change", args=[provider_id])
        provider = self.get_object(request, str(provider_id))
        if request.method != "POST" or provider is None:
            return HttpResponseRedirect(page)
        if not self.has_view_or_change_permission(request, provider):
            raise PermissionDenied
        self._report(request, provider)
        return HttpResponseRedirect(page)

    @admin.display(description="API key variable", ordering="api_key_env")
    def key_variable(self, obj: Provider) -> str:
        """The variable's name and whether this server has it set (never its value)."""
        if not obj.api_key_env:
            return format_html('<span class="health-none">{}</span>', "no key")
        if provider_key_problem(api_key_env=obj.api_key_env):
            return format_html("{} <strong>{}</strong>", obj.api_key_env, "(not set here)")
        return format_html("{} {}", obj.api_key_env, "(set)")

    @admin.action(description="Test connection of selected providers")
    def test_connection(self, request: HttpRequest, queryset: Any) -> None:
        for provider in queryset:
            self._report(request, provider)


# --- end of provider checks ------------------------------------------------------------------


@admin.register(Provider)
class ProviderAdmin(ProviderChecksAdmin):
    form = ProviderAdminForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = [
        "name",
        "base_url",
        "key_variable",
        "connect_timeout",
        "read_timeout",
        "breaker_failures",
        "breaker_open_until",
    ]
    search_fields = ["name", "base_url"]
    fields = [
        "name",
        "base_url",
        "api_key_env",
        "connect_timeout",
        "read_timeout",
        "max_retries",
        "breaker_failures",
        "breaker_open_until",
    ]
    # The circuit breaker is set by live battles; staff only reset it.
    readonly_fields = ["breaker_failures", "breaker_open_until"]
    actions = ["reset_breaker", "test_connection"]

    @admin.action(description="Reset the circuit breaker of selected providers")
    def reset_breaker(self, request: HttpRequest, queryset: Any) -> None:
        count = provider_breaker_reset(provider_ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"Reset {count} circuit breaker(s).")


# --- Model list: health, and the columns other apps add (the ratings app's leaderboard) -------

#: Makes one column of the model list for one request: ``factory(request)`` returns the
#: column's callable (``obj -> str``, its ``__name__`` and ``short_description`` set), which may
#: read what it needs once for the whole page. Registered by apps downstream of the arena,
#: which it cannot import (``ratings.admin`` adds the leaderboard status).
ModelListColumn = Callable[[HttpRequest], Callable[[ArenaModel], str]]
MODEL_LIST_COLUMNS: dict[str, ModelListColumn] = {}


def model_list_column_register(name: str, factory: ModelListColumn) -> None:
    """Add (or, under the same name, replace) a column at the end of the model list."""
    MODEL_LIST_COLUMNS[name] = factory


def _ago(when: datetime) -> str:
    if timezone.now() - when < timedelta(minutes=1):
        return "just now"
    return f"{timesince(when).split(',')[0]} ago"


class ArenaModelHealthMixin:
    """The model list's compact columns and each model's health: its provider's breaker, its
    last failed and last good live answer (``arena.selectors.models_with_health``)."""

    @admin.display(description="Model", ordering="display_name")
    def model_name(self, obj: ArenaModel) -> str:
        catalogue = " · ".join(p for p in (obj.parameter_size, obj.license) if p)
        return format_html(
            '{}<span class="model-meta">{}{}</span><span class="model-meta">{}</span>'
            '<span class="model-meta">{}</span>',
            obj.display_name,
            obj.slug,
            f" · {obj.organization}" if obj.organization else "",
            catalogue,
            f"upstream: {obj.upstream_model_id}" if obj.upstream_model_id else "",
        )

    @admin.display(description="Health")
    def health(self, obj: ArenaModel) -> str:
        if obj.provider is None:
            return format_html('<span class="health-none">{}</span>', "pool only")
        state = provider_breaker_state(obj.provider)
        breaker = f"breaker {state}"
        if state == "open" and obj.provider.breaker_open_until is not None:
            until = timezone.localtime(obj.provider.breaker_open_until).strftime("%H:%M")
            breaker += f" until {until}"
        if obj.provider.breaker_failures:
            breaker += f", {obj.provider.breaker_failures} failure(s)"
        success_at: datetime | None = getattr(obj, "last_success_at", None)
        error_at: datetime | None = getattr(obj, "last_error_at", None)
        error = str(getattr(obj, "last_error", "") or "")
        success = f"last ok {_ago(success_at)}" if success_at else "no good answer yet"
        failure = ""
        if error_at:
            failure = f"last error {_ago(error_at)}: {error[:80] or '(no text)'}"
        return format_html(
            '{}: <span class="health-{}">{}</span><span class="model-meta">{}</span>'
            '<span class="model-meta health-error" title="{}">{}</span>',
            obj.provider.name,
            state,
            breaker,
            success,
            error,
            failure,
        )


# --- end of the model list's health and columns ----------------------------------------------


# --- A model's standing: retiring needs a reason, every change is recorded -------------------
#
# Retiring a model (unticking "Is active") is refused without a reason, rather than recorded
# with a stock one: the reason is published on /transparency, and "deactivated by staff" would
# tell a reader nothing. The change form asks for it beside the checkbox; the list's checkbox
# cannot, so it refuses and points to the "Retire" action, which asks. Reactivating and making
# a model public or private are recorded too, a reason optional.

RETIRE_WITHOUT_REASON = (
    "Say why the model is retired (the reason is published on /transparency), in "
    '"Reason for this change" below.'
)
RETIRE_FROM_THE_LIST = (
    'To retire a model, select it and use the action "Retire selected models", which asks '
    "for the reason published on /transparency."
)


def _was_active(form: forms.ModelForm[ArenaModel]) -> bool:
    return bool(form.instance.pk) and bool(form.initial.get("is_active"))


class ArenaModelAdminForm(forms.ModelForm[ArenaModel]):
    """The model's form, with the reason for a change of standing (required to retire)."""

    status_reason = forms.CharField(
        label="Reason for this change",
        required=False,
        max_length=STATUS_REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Required to retire the model (unticking Is active): published with the "
        "date on /transparency. Optional when reactivating it or changing Is public.",
    )

    # No Meta: the admin builds it with the fields it shows.

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        retiring = _was_active(self) and cleaned.get("is_active") is False
        if retiring and not str(cleaned.get("status_reason") or "").strip():
            self.add_error("status_reason", RETIRE_WITHOUT_REASON)
        return cleaned


class ArenaModelListForm(forms.ModelForm[ArenaModel]):
    """A row of the model list: reactivating or changing Is public there is recorded; retiring
    is refused, since the row has no room for the reason."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if _was_active(self) and cleaned.get("is_active") is False:
            self.add_error("is_active", RETIRE_FROM_THE_LIST)
        return cleaned


class RetireForm(forms.Form):
    reason = forms.CharField(
        label="Why are these models retired?",
        max_length=STATUS_REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Published with the date on /transparency, for each model retired.",
        error_messages={"required": "Say why the models are retired."},
    )


@admin.register(ArenaModel)
class ArenaModelAdmin(ArenaModelHealthMixin, admin.ModelAdmin[ArenaModel]):
    form = ArenaModelAdminForm
    readonly_fields = ["status_history"]
    # Fits a 1366 px screen beside the admin's sidebars: what the model is (names, upstream id)
    # and how its endpoint is doing (provider, breaker, last answers) each in one column of
    # stacked lines (static/css/admin_models.css).
    list_display = [
        "model_name",
        "sampling_weight",
        "is_active",
        "is_public",
        "health",
    ]
    list_display_links = ["model_name"]
    list_filter = [
        "is_active",
        "is_public",
        "supports_images",
        "provider",
        "organization",
        "outputs_reuse",
    ]
    list_editable = ["sampling_weight", "is_active", "is_public"]
    search_fields = ["slug", "display_name", "organization", "upstream_model_id"]
    prepopulated_fields = {"slug": ("display_name",)}
    actions = ["retire"]

    class Media:
        css = {"all": ["css/admin_models.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[ArenaModel]:
        return models_with_health(super().get_queryset(request))

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        extra = [factory(request) for factory in MODEL_LIST_COLUMNS.values()]
        return [*super().get_list_display(request), *extra]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        # The reason and the history right after the two checkboxes they are about.
        standing = ["status_reason", "status_history"]
        fields = [f for f in super().get_fields(request, obj) if f not in standing]
        at = fields.index("is_public") + 1 if "is_public" in fields else len(fields)
        return [*fields[:at], *standing, *fields[at:]]

    @admin.display(description="History of standing (published on /transparency)")
    def status_history(self, obj: ArenaModel) -> str:
        changes = list(obj.status_changes.all()) if obj.pk else []
        if not changes:
            return "No change recorded."
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                "<li>{}: {}{}{}</li>",
                (
                    (
                        f"{c.at:%Y-%m-%d %H:%M} UTC",
                        c.get_change_display(),
                        f" by {c.by}" if c.by else "",
                        f" ({c.reason})" if c.reason else "",
                    )
                    for c in changes
                ),
            ),
        )

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> Any:
        return super().get_changelist_form(request, form=ArenaModelListForm, **kwargs)

    def save_model(self, request: HttpRequest, obj: ArenaModel, form: Any, change: bool) -> None:
        """The form's other fields as usual; a change of standing through its service, which
        records it (a new model starts as it is: nothing came before it)."""
        if not change:
            super().save_model(request, obj, form, change)
            return
        active, public = obj.is_active, obj.is_public
        stored = ArenaModel.objects.filter(pk=obj.pk).values("is_active", "is_public").get()
        obj.is_active, obj.is_public = stored["is_active"], stored["is_public"]
        super().save_model(request, obj, form, change)
        reason = str(form.cleaned_data.get("status_reason") or "")
        by = request.user.get_username()
        if public != obj.is_public:
            model_visibility_set(model=obj, public=public, reason=reason, by=by)
        if active and not obj.is_active:
            model_reactivate(model=obj, reason=reason, by=by)
        elif not active and obj.is_active:
            model_retire(model=obj, reason=reason, by=by)

    @admin.action(description="Retire selected models (asks why; published on /transparency)")
    def retire(self, request: HttpRequest, queryset: Any) -> TemplateResponse | None:
        form = RetireForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            by = request.user.get_username()
            retired = [
                m.slug
                for m in queryset
                if model_retire(model=m, reason=form.cleaned_data["reason"], by=by)
            ]
            self.message_user(
                request,
                f"{len(retired)} model(s) retired: {', '.join(retired) or 'none'} "
                "(already retired ones are left as they were).",
                messages.SUCCESS,
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Retire models",
            "opts": self.model._meta,
            "models": list(queryset),
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "arena/admin/arenamodel_retire.html", context)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A model with battles is retired, never deleted (the foreign keys also protect it).
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


# --- Reactions: the reason tags staff edit, and what visitors said --------------------------


@admin.register(ReactionTag)
class ReactionTagAdmin(admin.ModelAdmin[ReactionTag]):
    """The reasons offered with a thumbs up or down. Retire a tag (untick *Is active*) rather
    than delete it: reactions that carry it keep their meaning in exports."""

    list_display = ["label", "slug", "polarity", "position", "is_active"]
    list_editable = ["position", "is_active"]
    list_filter = ["polarity", "is_active"]
    prepopulated_fields = {"slug": ["label"]}

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Reaction)
class ReactionAdmin(ReadOnlyAdmin):
    list_display = ["battle", "side", "liked", "tags", "after_reveal", "updated_at"]
    list_filter = ["liked", "after_reveal"]


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
