"""Registering live models from the shell (the admin is the main way)."""

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction

from arena.errors import ArenaError
from arena.models import ArenaModel, Provider


def model_register(
    *,
    slug: str,
    provider_url: str,
    upstream_model: str,
    api_key_env: str = "",
    weight: float = 1.0,
    display_name: str = "",
    organization: str = "",
) -> ArenaModel:
    """Create or update the live model ``slug`` served by the provider at ``provider_url``.

    The provider is found by its base URL, or created and named after the URL's host and port.
    Running the same registration again changes nothing.
    """
    url = provider_url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ArenaError(
            "invalid", f"{provider_url!r} is not an http(s) URL.", field="provider_url"
        )
    if weight < 0:
        raise ArenaError("invalid", "The weight cannot be negative.", field="weight")
    if not upstream_model:
        raise ArenaError("invalid", "Name the upstream model.", field="upstream_model")
    with transaction.atomic():
        provider = Provider.objects.filter(base_url=url).first()
        if provider is None:
            provider = Provider(name=_provider_name(url), base_url=url, api_key_env=api_key_env)
            _validate(provider)
            provider.save()
        elif api_key_env and provider.api_key_env != api_key_env:
            provider.api_key_env = api_key_env
            _validate(provider)
            provider.save(update_fields=["api_key_env", "updated_at"])
        model = ArenaModel.objects.filter(slug=slug).first() or ArenaModel(slug=slug)
        model.display_name = display_name or model.display_name or slug
        model.organization = organization or model.organization
        model.provider = provider
        model.upstream_model_id = upstream_model
        model.sampling_weight = weight
        model.is_active = True
        _validate(model)
        model.save()
    return model


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
        raise ArenaError("invalid", f"{field}: {' '.join(messages)}", field=field) from None
