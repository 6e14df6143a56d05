"""Absolute links the site hands out, on its configured public origin (``ARENA_PUBLIC_ORIGIN``).

A request's Host header is the client's to choose among the allowed hosts, port included
(``Host: localhost:1``), so a link built from it (``request.build_absolute_uri``) names whatever
the client sent: in a share page's og: tags, a crawler copies it into every preview of the link.
Every absolute link is built here instead, from the one origin the operator configured.
"""

from urllib.parse import urlsplit

from django.conf import settings


def absolute_url(path: str) -> str:
    """``path`` (absolute, as ``reverse`` gives it) on the public origin."""
    assert path.startswith("/"), path
    return settings.ARENA_PUBLIC_ORIGIN + path


def public_host() -> str:
    """The public origin's host (and port, when it has one), as a person would type it."""
    return urlsplit(settings.ARENA_PUBLIC_ORIGIN).netloc
