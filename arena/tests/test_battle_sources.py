"""The registry of battle sources other than the pool (``arena.battle_sources``): the seam the
environment app plugs into, so the arena serves its battles without importing it."""

import random

import pytest

from arena import battle_sources
from arena.battle_sources import (
    BattleSource,
    battle_source_register,
    battle_sources_have_work,
    battle_sources_open,
    battle_sources_serve,
)


@pytest.fixture
def no_sources(monkeypatch):
    monkeypatch.setattr(battle_sources, "_sources", {})


def _source(name, *, serves, log, is_open=True, has_work=False):
    def serve(*, session_key, rng):
        log.append((name, session_key))
        return serves

    return BattleSource(name=name, is_open=lambda: is_open, serve=serve, has_work=lambda: has_work)


def test_the_installed_environment_app_registers_its_source():
    assert [source.name for source in battle_sources.battle_sources()] == ["environment"]


def test_sources_are_asked_in_order_until_one_serves(no_sources):
    log: list[tuple[str, str]] = []
    served = object()
    battle_source_register(_source("first", serves=None, log=log))
    battle_source_register(_source("second", serves=served, log=log))
    battle_source_register(_source("third", serves=object(), log=log))
    assert battle_sources_serve(session_key="s1", rng=random.Random(1)) is served
    assert log == [("first", "s1"), ("second", "s1")]


def test_without_sources_nothing_is_open_served_or_waiting(no_sources):
    assert battle_sources_serve(session_key="s1", rng=random.Random(1)) is None
    assert battle_sources_open() is False
    assert battle_sources_have_work() is False


def test_open_and_work_are_any_sources(no_sources):
    log: list[tuple[str, str]] = []
    battle_source_register(_source("closed", serves=None, log=log, is_open=False))
    assert battle_sources_open() is False
    battle_source_register(_source("busy", serves=None, log=log, has_work=True))
    assert battle_sources_open() is True
    assert battle_sources_have_work() is True


def test_registering_a_name_again_replaces_its_source(no_sources):
    log: list[tuple[str, str]] = []
    battle_source_register(_source("env", serves=None, log=log))
    replacement = object()
    battle_source_register(_source("env", serves=replacement, log=log))
    assert len(battle_sources.battle_sources()) == 1
    assert battle_sources_serve(session_key="s2", rng=random.Random(1)) is replacement
