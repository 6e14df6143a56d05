"""The static files storage production serves from."""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticFilesStorage(CompressedManifestStaticFilesStorage):  # type: ignore[misc]  # untyped
    """Whitenoise's compressed manifest storage, also rewriting the ES modules' imports.

    Django rewrites ``import ... from "./render.js"`` to the hashed name only when asked: without
    it, a module would be fetched by its unhashed name (served, but not cached for good) and,
    being another URL than the hashed one, could even run twice on one page.
    """

    support_js_module_import_aggregation = True
