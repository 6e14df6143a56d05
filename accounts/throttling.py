"""The name django-axes counts failed sign-ins under (``AXES_USERNAME_CALLABLE``)."""

from typing import Any

from django.http import HttpRequest


def axes_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The admin's ``username``, or the ``email`` a visitor signs in with (allauth passes it to
    ``authenticate()`` as ``email=``): without this every visitor's failed password sign-in
    from one address would count under one empty name, and five of them would lock every
    visitor's password sign-in from that address. allauth's form posts the email as
    ``login`` when axes reads the request rather than the credentials."""
    if credentials is not None:
        name = credentials.get("username") or credentials.get("email")
    else:
        name = request.POST.get("username") or request.POST.get("login")
    return str(name) if name else None
