"""System checks of the accounts' configuration."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Info, register


@register(deploy=True)
def email_configured(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Say (at the Info level: a site may run with email sign-in unused) that production
    prints sign-in codes on its standard output while ``EMAIL_URL`` is unset."""
    if not getattr(settings, "ARENA_PRODUCTION", False):
        return []
    if not settings.EMAIL_BACKEND.endswith("console.EmailBackend"):
        return []
    return [
        Info(
            "EMAIL_URL is unset: sign-in and confirmation codes are printed on the web "
            "processes' standard output instead of being mailed.",
            hint="Set EMAIL_URL to the mail server's URL (docs/accounts.md).",
            id="accounts.I001",
        )
    ]
