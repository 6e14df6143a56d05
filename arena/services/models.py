"""Registering live models from the shell (the admin is the main way), and changing a model's
standing: retiring it, reactivating it, making it public or private.

An existing model is changed only when the caller says so (``update=True``), every change is
reported as ``field: old -> new``, and a deactivated model stays deactivated unless
``activate=True``: staff who switched a model off are never overruled by a script.

A model's standing changes only here (``model_retire``, ``model_reactivate``,
``model_visibility_set``), and each change is kept as a ``ModelStatusChange`` with its time,
who made it and why; a retirement needs a reason. The fairness ledger on /transparency
publishes them, so no model leaves the arena, or comes back, silently.
"""

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from arena.errors import ArenaError, ErrorCode
from arena.models import STATUS_REASON_MAX, ArenaModel, ModelStatusChange, Provider, Vote


@dataclass(frozen=True)
class FieldChange:
    """One field an update changed, as shown to the operator."""

    field: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.field}: {self.old} -> {self.new}"


@dataclass(frozen=True)
class ModelRegistration:
    """What ``model_register`` did.

    ``became_live``: the model was pool-only (no provider) and now also answers live battles.
    ``still_inactive``: the model is deactivated and was left so (no ``activate``).
    """

    model: ArenaModel
    created: bool
    changes: tuple[FieldChange, ...] = ()
    became_live: bool = False
    still_inactive: bool = False
    votes: int = 0
    notes: tuple[str, ...] = ()


def _shown(value: object) -> str:
    if value is None or value == "":
        return "(none)"
    return repr(value) if isinstance(value, str) else str(value)


def _model_votes(*, model: ArenaModel) -> int:
    return Vote.objects.filter(Q(battle__model_a=model) | Q(battle__model_b=model)).count()


def _reason(reason: str) -> str:
    text = " ".join(reason.split())
    if len(text) > STATUS_REASON_MAX:
        raise ArenaError(
            ErrorCode.INVALID,
            f"The reason is {len(text)} characters long; at most {STATUS_REASON_MAX}.",
            field="reason",
        )
    return text


def _status_record(
    *, model: ArenaModel, change: str, reason: str, by: str, at: datetime | None
) -> ModelStatusChange:
    return ModelStatusChange.objects.create(
        model=model, change=change, reason=reason, by=by[:150], at=at or timezone.now()
    )


def _locked(model: ArenaModel) -> ArenaModel:
    return ArenaModel.objects.select_for_update().get(pk=model.pk)


def model_retire(
    *, model: ArenaModel, reason: str, by: str = "", at: datetime | None = None
) -> ModelStatusChange | None:
    """Take ``model`` out of new battles (its battles and votes stay) and record when and why.

    ``reason`` is required: it is published on /transparency. A model already retired is left
    as it is and None is returned (nothing recorded twice). Saving the model starts a new
    generation of the pool copies (``arena.pool_cache``), so it is not drawn again.
    """
    text = _reason(reason)
    if not text:
        raise ArenaError(
            ErrorCode.INVALID,
            "Say why the model is retired: the reason is published on /transparency.",
            field="reason",
        )
    with transaction.atomic():
        row = _locked(model)
        if not row.is_active:
            model.is_active = False
            return None
        row.is_active = False
        row.save(update_fields=["is_active", "updated_at"])
        model.is_active = False
        return _status_record(
            model=row, change=ModelStatusChange.Change.RETIRED, reason=text, by=by, at=at
        )


def model_reactivate(
    *, model: ArenaModel, reason: str = "", by: str = "", at: datetime | None = None
) -> ModelStatusChange | None:
    """Serve a retired ``model`` again, recorded with the time and, if given, why.

    A model that is active is left as it is and None is returned.
    """
    text = _reason(reason)
    with transaction.atomic():
        row = _locked(model)
        if row.is_active:
            model.is_active = True
            return None
        row.is_active = True
        row.save(update_fields=["is_active", "updated_at"])
        model.is_active = True
        return _status_record(
            model=row, change=ModelStatusChange.Change.REACTIVATED, reason=text, by=by, at=at
        )


def model_visibility_set(
    *, model: ArenaModel, public: bool, reason: str = "", by: str = "", at: datetime | None = None
) -> ModelStatusChange | None:
    """Make ``model`` public (shown on the leaderboard, named) or private, and record it.

    The record is how the ledger knows which of a model's battles were fought while it was
    private. Nothing changes (None) when the model already is as asked.
    """
    text = _reason(reason)
    with transaction.atomic():
        row = _locked(model)
        if row.is_public == public:
            model.is_public = public
            return None
        row.is_public = public
        row.save(update_fields=["is_public", "updated_at"])
        model.is_public = public
        change = (
            ModelStatusChange.Change.PUBLISHED if public else ModelStatusChange.Change.UNPUBLISHED
        )
        return _status_record(model=row, change=change, reason=text, by=by, at=at)


def model_register(
    *,
    slug: str,
    provider_url: str | None = None,
    upstream_model: str | None = None,
    api_key_env: str | None = None,
    weight: float | None = None,
    display_name: str | None = None,
    organization: str | None = None,
    update: bool = False,
    activate: bool = False,
    supports_images: bool | None = None,
) -> ModelRegistration:
    """Register the live model ``slug`` served by the provider at ``provider_url``.

    A new slug needs ``provider_url`` and ``upstream_model``. An existing slug is refused unless
    ``update`` is true; then only the options given change, and each change is reported. A
    deactivated model is re-activated only with ``activate``. ``supports_images`` marks the
    model vision-capable (True), or not (False); None leaves it as it is. The provider is found by its base
    URL, or created and named after the URL's host and port. Nothing is written when an
    ``ArenaError`` is raised.
    """
    if not slug:
        raise ArenaError(ErrorCode.INVALID, "Name the model's slug.", field="slug")
    url = None
    if provider_url is not None:
        url = provider_url.rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ArenaError(
                ErrorCode.INVALID, f"{provider_url!r} is not an http(s) URL.", field="provider_url"
            )
    if weight is not None and weight < 0:
        raise ArenaError(ErrorCode.INVALID, "The weight cannot be negative.", field="weight")
    if upstream_model is not None and not upstream_model:
        raise ArenaError(ErrorCode.INVALID, "Name the upstream model.", field="upstream_model")
    with transaction.atomic():
        model = ArenaModel.objects.select_related("provider").filter(slug=slug).first()
        created = model is None
        votes = 0 if model is None else _model_votes(model=model)
        if model is not None and not update:
            kind = "a live model" if model.is_live else "a pool-only model"
            raise ArenaError(
                ErrorCode.EXISTS,
                f"model {slug!r} already exists ({kind} with {votes} votes); "
                "pass --update to change it.",
                field="slug",
                status=409,
            )
        if model is None:
            if url is None or upstream_model is None:
                missing = "--provider-url" if url is None else "--upstream-model"
                raise ArenaError(
                    ErrorCode.INVALID, f"A new model needs {missing}.", field=missing.lstrip("-")
                )
            model = ArenaModel(slug=slug, display_name=display_name or slug, is_active=True)
        was_live = model.is_live
        notes: list[str] = []
        changes: list[FieldChange] = []
        provider: Provider | None
        if url is not None:
            provider = _provider_for(url, api_key_env or "", changes)
        elif api_key_env is not None and model.provider is not None:
            provider = model.provider
            _set_key_env(provider, api_key_env, changes)
        else:
            provider = model.provider
        if url is None and upstream_model is not None and provider is None:
            raise ArenaError(
                ErrorCode.INVALID,
                f"model {slug!r} has no provider: give --provider-url too.",
                field="provider_url",
            )
        old_provider = model.provider
        if not created and provider != old_provider:
            changes.append(
                FieldChange(
                    "provider",
                    old_provider.base_url if old_provider else "(none: pool-only)",
                    provider.base_url if provider else "(none)",
                )
            )
        model.provider = provider
        updates: dict[str, object] = {
            "upstream_model_id": upstream_model,
            "sampling_weight": weight,
            "display_name": display_name or None,
            "organization": organization,
            "supports_images": supports_images,
        }
        for name, value in updates.items():
            if value is None:
                continue
            old = getattr(model, name)
            if old != value:
                if not created:
                    changes.append(FieldChange(name, _shown(old), _shown(value)))
                setattr(model, name, value)
        reactivate = not model.is_active and activate
        if reactivate:
            changes.append(FieldChange("is_active", "False", "True"))
        _validate(model)
        if created or changes:
            model.save()
        if reactivate:
            # Through the one service that records it (the ledger shows every reactivation).
            model_reactivate(model=model, by="add_model --activate")
        became_live = not created and not was_live and model.is_live
        if became_live:
            notes.append(
                f"{slug} was a pool-only model ({votes} votes); it now also answers live battles."
            )
    return ModelRegistration(
        model=model,
        created=created,
        changes=tuple(changes),
        became_live=became_live,
        still_inactive=not model.is_active,
        votes=votes,
        notes=tuple(notes),
    )


def _provider_for(url: str, api_key_env: str, changes: list[FieldChange]) -> Provider:
    provider = Provider.objects.filter(base_url=url).first()
    if provider is None:
        provider = Provider(name=_provider_name(url), base_url=url, api_key_env=api_key_env)
        _validate(provider)
        provider.save()
    elif api_key_env:
        _set_key_env(provider, api_key_env, changes)
    return provider


def _set_key_env(provider: Provider, api_key_env: str, changes: list[FieldChange]) -> None:
    """Point ``provider`` at another key variable; it is shared by its models, so it is reported."""
    if provider.api_key_env == api_key_env:
        return
    changes.append(
        FieldChange(
            f"provider {provider.name} api_key_env",
            _shown(provider.api_key_env),
            _shown(api_key_env),
        )
    )
    provider.api_key_env = api_key_env
    _validate(provider)
    provider.save(update_fields=["api_key_env", "updated_at"])


def _provider_name(url: str) -> str:
    base = urlsplit(url).netloc or url
    name, n = base, 1
    while Provider.objects.filter(name=name).exists():
        n += 1
        name = f"{base} ({n})"
    return name[:100]


def _validate(obj: Provider | ArenaModel) -> None:
    try:
        obj.full_clean(validate_unique=False)
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise ArenaError(ErrorCode.INVALID, f"{field}: {' '.join(messages)}", field=field) from None
