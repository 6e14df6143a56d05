"""Battle sources other than the pool's, registered by the apps that own them: the seam through
which the environment API (the ``environment`` app) serves its battles without the arena
importing it.

A source says whether it is open at all (``is_open``: one cheap query, its answer kept per
process by ``arena.pool_cache`` under the ``env`` generation, which the source's owner bumps when
that answer may change), may serve a visitor's pool battle in its place (``serve``: a saved
``Battle``, or None to leave the turn to the pool), and says whether it could serve one now
(``has_work``: the battle page offers pool mode when only such a source can be served). Sources
are tried in the order they registered; each registers once, in its app's ``ready``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from arena.models import Battle


class ServeBattle(Protocol):
    def __call__(self, *, session_key: str, rng: random.Random) -> Battle | None: ...


@dataclass(frozen=True)
class BattleSource:
    name: str
    is_open: Callable[[], bool]
    serve: ServeBattle
    has_work: Callable[[], bool]


_lock = threading.Lock()
_sources: dict[str, BattleSource] = {}


def battle_source_register(source: BattleSource) -> None:
    """Register (or, under the same name, replace) a battle source."""
    with _lock:
        _sources[source.name] = source


def battle_sources() -> tuple[BattleSource, ...]:
    with _lock:
        return tuple(_sources.values())


def battle_sources_open() -> bool:
    """Whether any registered source is open (before it is asked to serve)."""
    return any(source.is_open() for source in battle_sources())


def battle_sources_have_work() -> bool:
    """Whether some registered source could serve a battle now."""
    return any(source.has_work() for source in battle_sources())


def battle_sources_serve(*, session_key: str, rng: random.Random) -> Battle | None:
    """The first battle a registered source serves in place of a pool battle, else None."""
    for source in battle_sources():
        battle = source.serve(session_key=session_key, rng=rng)
        if battle is not None:
            return battle
    return None
