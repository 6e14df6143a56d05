"""The arena's test fixtures (a visitor who accepted the terms, a frozen wall clock...), which the
environment's tests use as the arena's own do."""

from arena.tests.conftest import (  # noqa: F401 (fixtures, found by name)
    frozen_clock,
    other_visitor,
    upstream_clients,
    visitor,
)
