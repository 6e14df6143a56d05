"""Rigging simulation: can an attacker lift a model on the leaderboard?

    .venv/bin/python bench/rigging.py [--quick] [--seed 12] [--shapes a,b,c,d,naive] [--keep]

A synthetic arena through the real services, no HTTP: battles are served by
``arena.services.battles.battle_start_pool`` (the demo's real models and their real MT-bench pool
answers, several per model and prompt where the demo has them, ``manage.py load_demo``), votes
recorded by ``arena.services.votes.vote_record``, the daily caps taken as the vote view takes
them (``arena.services.vote_guards.vote_caps_take``), anomalous voters flagged by
``ratings.voters.voters_flag_run`` (what ``manage.py flag_voters`` and its periodic task run),
and the leaderboard fitted by the real engine from the votes the snapshot reads
(``arena.selectors.votes_for_rating`` with each source's bound, ``ratings.selectors.source_cap``).

1. A database of its own (``arena_bench_rigging_*`` on the server ``DATABASE_URL`` names) is
   migrated and loaded with the demo. What each defence does to the demo's 1,751 real expert
   votes is printed; then they are deleted so that outcomes follow the seeded true ratings.
2. Honest voters: H sessions (each its own address and a browser user-agent), each voting K pool
   battles with Bradley-Terry outcomes from seeded true ratings (Elo scale, 10% ties); the
   target (``--target``, default gpt-3.5-turbo, a model with real historical votes) is given
   the middle rating (rank 6 of 10). This state is saved as a template database.
3. For each attack shape (``SHAPES``: (a) 10 sessions from 10 addresses, 100 votes each; (b) 10
   sessions from 1 address; (c) 100 sessions from 100 addresses, 10 votes each; (d) the
   omnipresent strategy from 10 addresses; the naive attacker), with the defences off and on,
   a copy of the template gets the attacker's sessions, each trying its votes:
   - ``style``: identify the target from an answer naming it (what the identity-leak flag
     catches), else from its answers' text (the attacker has collected the target's published
     answer to each pool prompt, the first imported variant; the pool rotates the others), else
     from their style (a Gaussian naive-Bayes classifier on the style counts and length of
     every model's pool answers), then vote for it; in battles where neither side looks like
     the target, vote as the public leaderboard predicts (blend in).
   - ``omnipresent`` (Min et al. 2025): as ``style`` where the target is seen; in battles without
     it, vote against whichever side is rated just above the target (its upper neighbours).
   - ``shorter`` (the naive attacker): one session, 150 votes, always the shorter answer.
   Defences OFF: no caps, no anomaly run, every recorded vote rated (identity-leak flags
   ignored). Defences ON: the daily caps (ARENA_VOTES_PER_SESSION_PER_DAY,
   ARENA_VOTES_PER_IP_PER_DAY at their defaults), identity-leak flags (set when the answer is
   saved, applied to the vote), ``voters_flag_run`` (ARENA_ANOMALY_* defaults) and the
   per-source bound (RATINGS_SOURCE_* defaults) before rating. The proof-of-work challenge is
   not simulated: it costs a scripted attacker a few hundred milliseconds of CPU per session.
4. Prints, per shape: attacker votes tried / counted / flagged / left out by the source bound,
   honest votes flagged or left out, the target's rank and rating with and without the
   attacker (the honest-only fit on the same defences), the shift and the goal (with the
   defences on, (a), (b), (d): at most 1 rank and 20 points; naive: 90% of its votes flagged);
   then how recognisable each model's pool answers are, before and after rotation.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shape import server_url  # noqa: E402

BROWSER_UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0"
TIE_SHARE = 0.10


@dataclass(frozen=True)
class Shape:
    """One attack: a strategy played by ``sessions`` sessions, ``per_address`` of them per
    address, each trying ``votes`` votes."""

    name: str
    strategy: str
    sessions: int
    per_address: int
    votes: int
    # When the votes are cast: "burst" (now, within the hour), "week" (spread evenly over the
    # seven days before now: under each day's test), "aged" (each address first casts one
    # blending vote 31 days before, so that its burst now comes from trusted sources).
    timing: str = "burst"

    def describe(self) -> str:
        addresses = math.ceil(self.sessions / self.per_address)
        timing = {
            "burst": "",
            "week": ", spread over the 7 days before",
            "aged": ", each address aged by one vote 31 days before",
        }[self.timing]
        return (
            f"{self.strategy}, {self.sessions} session{'s' * (self.sessions > 1)} from "
            f"{addresses} address{'es' * (addresses > 1)}, {self.votes} votes each{timing}"
        )


# The attack shapes the leaderboard must withstand, at the sizes a deployment meets.
SHAPES = (
    Shape("a", "style", sessions=10, per_address=1, votes=100),
    Shape("b", "style", sessions=10, per_address=10, votes=100),
    Shape("c", "style", sessions=100, per_address=1, votes=10),
    Shape("d", "omnipresent", sessions=10, per_address=1, votes=100),
    Shape("naive", "shorter", sessions=1, per_address=1, votes=150),
    # The attacker who has read docs/integrity.md: the burst test groups votes by day and week
    # and trusts a source 30 days after its first vote, so it spreads or ages its botnet.
    Shape("e", "style", sessions=100, per_address=1, votes=10, timing="week"),
    Shape("f", "style", sessions=100, per_address=1, votes=10, timing="aged"),
)
QUICK_SHAPES = (
    Shape("a", "style", sessions=4, per_address=1, votes=50),
    Shape("b", "style", sessions=4, per_address=4, votes=50),
    Shape("c", "style", sessions=40, per_address=1, votes=5),
    Shape("d", "omnipresent", sessions=4, per_address=1, votes=50),
    Shape("naive", "shorter", sessions=1, per_address=1, votes=150),
    Shape("e", "style", sessions=40, per_address=1, votes=5, timing="week"),
    Shape("f", "style", sessions=40, per_address=1, votes=5, timing="aged"),
)

# Honest history: sessions arrive over the 30 days before the attack, each voting within
# minutes; HONEST_NOW_SHARE of them arrive in the hour before it (the attack's own day).
HISTORY_DAYS = 30
HONEST_NOW_SHARE = 0.1


@dataclass
class Config:
    seed: int
    honest_sessions: int
    honest_votes: int
    shapes: tuple[Shape, ...]
    target: str


@dataclass
class Outcome:
    strategy: str
    defences: str
    tried: int = 0
    accepted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    seen_target: int = 0
    target_battles: int = 0
    by_method: dict[str, int] = field(default_factory=dict)
    voted_target_right: int = 0
    voted_target_wrong: int = 0
    attacker_flagged: int = 0
    attacker_flag_reasons: dict[str, int] = field(default_factory=dict)
    honest_flagged: int = 0
    honest_flag_reasons: dict[str, int] = field(default_factory=dict)
    honest_total: int = 0
    # Left out of the fit by the per-source bound (defences on), of the attacker and honest.
    attacker_capped: int = 0
    honest_capped: int = 0
    # Per anomaly test (the smallest p-value of a flagged voter or source): (attacker, honest).
    by_test: dict[str, tuple[int, int]] = field(default_factory=dict)
    rating: dict[str, Any] = field(default_factory=dict)
    bursts: list[str] = field(default_factory=list)  # what the burst test found (defences on)


# --- database -------------------------------------------------------------------------------


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(server_url("postgres"), autocommit=True) as conn:
        conn.execute(sql)


def _use_database(name: str) -> None:
    from django.db import connections

    connections.close_all()
    connections["default"].settings_dict["NAME"] = name


def _setup_django(base: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    os.environ["DATABASE_URL"] = server_url(base)
    os.environ.pop("REDIS_URL", None)  # the caps count in this process's memory cache
    os.environ["ARENA_ACTIVE_SAMPLING"] = "false"  # pairs by sampling weight (no snapshot here)
    import django

    django.setup()
    from arena.signals import vote_recorded

    # No after-vote snapshot refresh: the simulation fits once per scenario, at the end.
    vote_recorded.receivers = []


# --- the arena ------------------------------------------------------------------------------


def _true_ratings(slugs: list[str], rng: random.Random, target: str) -> dict[str, float]:
    """Seeded true ratings (Elo scale), spread like a real arena's top dozen; the target is put
    in the middle (rank 6 of 10) so that there is room to lift it."""
    ratings = sorted((rng.gauss(1000, 80) for _ in slugs), reverse=True)
    others = [s for s in slugs if s != target]
    rng.shuffle(others)
    order = others[:]
    order.insert(len(slugs) // 2, target)
    return dict(zip(order, ratings, strict=True))


def _bt_outcome(ra: float, rb: float, rng: random.Random) -> str:
    if rng.random() < TIE_SHARE:
        return "tie"
    p_a = 1.0 / (1.0 + 10 ** ((rb - ra) / 400))
    return "model_a" if rng.random() < p_a else "model_b"


@dataclass
class Voter:
    session_key: str
    voter_id: str
    ip: str


def _voter(tag: str, ip: str) -> Voter:
    from arena.identity import voter_id_new
    from arena.services.terms import terms_accept

    voter_id = voter_id_new()
    terms_accept(voter_id=voter_id, ip=ip)
    return Voter(session_key=f"{tag}-{voter_id}"[:40], voter_id=voter_id, ip=ip)


def _battle(voter: Voter, rng: random.Random) -> tuple[Any, str, str, list[Any]]:
    from arena.services.battles import battle_start_pool

    battle = battle_start_pool(session_key=voter.session_key, rng=rng).battle
    messages = list(battle.messages.all())
    return battle, battle.model_a.slug, battle.model_b.slug, messages


def _vote(voter: Voter, battle_id: Any, winner: str, *, caps: bool) -> tuple[int, bool]:
    """The vote view's steps without HTTP: the daily caps (when ``caps``), then vote_record.

    A vote the caps refuse is still recorded here and reported as refused (True), so that one
    run serves both the defences-off fit (every vote) and the defences-on fit (the refused
    votes deleted before flagging and rating: exactly what the view would have left)."""
    from arena.errors import ArenaError, ErrorCode
    from arena.services.vote_guards import vote_caps_take
    from arena.services.votes import vote_record

    refused = False
    if caps:
        try:
            vote_caps_take(session_key=voter.session_key, ip=voter.ip)
        except ArenaError as exc:
            if exc.code != ErrorCode.VOTE_CAP:
                raise
            refused = True
    vote = vote_record(
        battle_id=battle_id,
        session_key=voter.session_key,
        voter_id=voter.voter_id,
        winner=winner,
        ip=voter.ip,
        user_agent=BROWSER_UA,
    ).vote
    return int(vote.pk), refused


def _backdate(vote_ids: list[int], start: Any) -> None:
    """Cast ``vote_ids`` from ``start`` on, thirty seconds apart (a visit of a few minutes)."""
    from datetime import timedelta

    from arena.models import Vote

    for k, pk in enumerate(vote_ids):
        Vote.objects.filter(pk=pk).update(created_at=start + timedelta(seconds=30 * k))


def honest_votes(cfg: Config, truth: dict[str, float], rng: random.Random) -> int:
    """Honest sessions, each one visit of ``honest_votes`` votes: most over the 30 days before
    the attack, ``HONEST_NOW_SHARE`` in the hour before it."""
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    n = 0
    recent = int(cfg.honest_sessions * HONEST_NOW_SHARE)
    for i in range(cfg.honest_sessions):
        voter = _voter("honest", f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}")
        ids = []
        for _ in range(cfg.honest_votes):
            battle, a, b, _ = _battle(voter, rng)
            ids.append(_vote(voter, battle.pk, _bt_outcome(truth[a], truth[b], rng), caps=False)[0])
            n += 1
        if i < cfg.honest_sessions - recent:
            back = timedelta(days=rng.uniform(1, HISTORY_DAYS))
        else:
            back = timedelta(minutes=rng.uniform(5, 60))
        _backdate(ids, now - back)
    return n


# --- the attacker ---------------------------------------------------------------------------


def _fold(text: str) -> str:
    return " ".join(text.split())[:400]


def _features(style: dict[str, Any]) -> list[float]:
    return [
        math.log1p(style.get("tokens", 0)),
        math.log1p(sum(style.get("header_count", {}).values())),
        math.log1p(sum(style.get("list_count", {}).values())),
        math.log1p(sum(style.get("bold_count", {}).values())),
    ]


class StyleClassifier:
    """Gaussian naive Bayes over every model's pool answers (turn by turn): P(model | answer)."""

    def __init__(self) -> None:
        from answer_style import style_counts
        from arena.models import Completion

        samples: dict[str, list[list[float]]] = {}
        self.texts: dict[str, set[str]] = {}
        # The attacker knows one answer per (prompt, model): the first variant, the published one.
        published: set[tuple[int, str]] = set()
        for prompt_id, slug, turns in (
            Completion.objects.filter(source="pool")
            .order_by("pk")
            .values_list("prompt_id", "model__slug", "turns")
        ):
            known = (prompt_id, slug) not in published
            published.add((prompt_id, slug))
            for text in turns:
                samples.setdefault(slug, []).append(_features(dict(style_counts(text))))
                if known:
                    self.texts.setdefault(slug, set()).add(_fold(text))
        self.stats: dict[str, list[tuple[float, float]]] = {}
        for slug, rows in samples.items():
            cols = list(zip(*rows, strict=True))
            self.stats[slug] = [
                (sum(c) / len(c), max(1e-2, sum((x - sum(c) / len(c)) ** 2 for x in c) / len(c)))
                for c in cols
            ]

    def log_likelihood(self, slug: str, answers: list[list[float]]) -> float:
        total = 0.0
        for features in answers:
            for x, (mean, var) in zip(features, self.stats[slug], strict=True):
                total += -0.5 * math.log(2 * math.pi * var) - (x - mean) ** 2 / (2 * var)
        return total

    def p_target(self, target: str, answers: list[list[float]]) -> float:
        logs = {slug: self.log_likelihood(slug, answers) for slug in self.stats}
        top = max(logs.values())
        z = sum(math.exp(v - top) for v in logs.values())
        return math.exp(logs[target] - top) / z


def _side_target(
    messages: list[Any], target: str, target_names: list[str], clf: StyleClassifier
) -> tuple[str | None, str]:
    """The side the attacker takes for the target: an answer naming it, else an answer it knows
    as the target's (the same text), else the classifier's more likely side when its probability exceeds three times the prior; None when neither looks like it."""
    from arena.leaks import names_in_answer

    for side in ("a", "b"):
        for m in messages:
            if m.side == side and names_in_answer(
                m.content, names=target_names, user_turns=[m.user_content]
            ):
                return side, "named"
    # The pool's answers are stored texts: an attacker who has collected the target's published
    # answer to each pool prompt recognises it (not the other variants the rotation shows).
    known = clf.texts.get(target, set())
    for m in messages:
        if _fold(m.content) in known:
            return str(m.side), "text"
    probs = {
        side: clf.p_target(
            target, [_features(dict(m.style or {})) for m in messages if m.side == side]
        )
        for side in ("a", "b")
    }
    side = max(probs, key=lambda s: probs[s])
    # Present when the target is three times likelier than a model chosen at random.
    return (side, "style") if probs[side] > 3 / len(clf.stats) else (None, "")


def attacker_votes(
    cfg: Config,
    shape: Shape,
    *,
    caps: bool,
    public: dict[str, float],
    clf: StyleClassifier,
    rng: random.Random,
    out: Outcome,
) -> tuple[list[int], list[int]]:
    """The attacker's votes: (ids recorded, ids of those the daily caps refused)."""
    from arena.leaks import model_names
    from arena.models import ArenaModel

    target_names = model_names(ArenaModel.objects.get(slug=cfg.target))
    above = sorted((s for s in public if public[s] > public[cfg.target]), key=lambda s: public[s])
    neighbours = set(above[:3])  # the three rated just above the target
    ids: list[int] = []
    refused: list[int] = []
    strategy = shape.strategy
    voters = []
    for i in range(shape.sessions):
        address = i // shape.per_address
        voters.append(_voter("attacker", f"198.51.{address // 256}.{address % 256}"))
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    for voter in voters:
        if shape.timing == "aged":
            # One blending vote 31 days ago: the address is trusted from then on.
            battle, a, b, _ = _battle(voter, rng)
            pk, _ = _vote(voter, battle.pk, _bt_outcome(public[a], public[b], rng), caps=False)
            _backdate([pk], now - timedelta(days=31))
            ids.append(pk)
        first_vote = len(ids)
        for _ in range(shape.votes):
            battle, a, b, messages = _battle(voter, rng)
            if strategy == "shorter":
                tokens = {
                    side: sum((m.style or {}).get("tokens", 0) for m in messages if m.side == side)
                    for side in ("a", "b")
                }
                out.target_battles += cfg.target in (a, b)
                out.tried += 1
                vote_id, capped = _vote(
                    voter,
                    battle.pk,
                    "model_a" if tokens["a"] <= tokens["b"] else "model_b",
                    caps=caps,
                )
                ids.append(vote_id)
                if capped:
                    refused.append(vote_id)
                continue
            side, method = _side_target(messages, cfg.target, target_names, clf)
            truly = {"a": a, "b": b}
            out.target_battles += cfg.target in (a, b)
            if side is not None:
                out.seen_target += 1
                out.by_method[method] = out.by_method.get(method, 0) + 1
                if truly[side] == cfg.target:
                    out.voted_target_right += 1
                else:
                    out.voted_target_wrong += 1
                winner = f"model_{side}"
            elif strategy == "omnipresent" and (a in neighbours or b in neighbours):
                # Push the target's upper neighbours down: vote for the other side.
                if a in neighbours and b in neighbours:
                    winner = "model_a" if public[a] < public[b] else "model_b"
                else:
                    winner = "model_b" if a in neighbours else "model_a"
            else:
                # Blend in: vote as the public leaderboard predicts.
                winner = _bt_outcome(public[a], public[b], rng)
            out.tried += 1
            vote_id, capped = _vote(voter, battle.pk, winner, caps=caps)
            ids.append(vote_id)
            if capped:
                refused.append(vote_id)
        if shape.timing == "week":
            _backdate(ids[first_vote:], now - timedelta(days=rng.uniform(0, 7)))
    return ids, refused


# --- rating ---------------------------------------------------------------------------------


def fit(
    *, defences: bool, exclude_ids: set[int] | None = None, honest_arena: bool = False
) -> dict[str, Any]:
    """The leaderboard's plain Bradley-Terry fit (overall, no style control) of the votes the
    snapshot would read: with ``defences``, the unflagged votes within each source's bound
    (``ratings.selectors.source_cap``, the settings' defaults); without, every vote.
    ``honest_arena``: the votes held out as a burst count again (the arena without the attack
    has no burst: its honest votes in the attack's window are held out only because of it)."""
    import pandas as pd

    from arena.models import Vote
    from arena.selectors import votes_for_rating
    from arena.services.flags import COHORT_BURST
    from ratings import engine
    from ratings.selectors import source_cap

    votes = votes_for_rating(
        include_flagged=not defences or honest_arena,
        source_cap=source_cap() if defences else None,
    )
    rows = list(votes.values_list("id", "battle__model_a__slug", "battle__model_b__slug", "winner"))
    frame = pd.DataFrame(rows, columns=["id", "model_a", "model_b", "winner"])
    if honest_arena and defences:
        other_flags = {
            pk
            for pk, flags in Vote.objects.filter(flagged=True).values_list("id", "flags")
            if set(flags or []) - {COHORT_BURST}
        }
        frame = frame[~frame["id"].isin(other_flags)]
    if exclude_ids:
        frame = frame[~frame["id"].isin(exclude_ids)]
    result = engine.rate(
        frame[["model_a", "model_b", "winner"]].reset_index(drop=True),
        style_control=False,
        with_online_elo=False,
    )
    ordered = sorted(result.models, key=lambda m: -m.rating)
    return {
        "ratings": {m.model: m.rating for m in result.models},
        "position": {m.model: i + 1 for i, m in enumerate(ordered)},
        "n": len(frame),
        "ids": set(frame["id"]),
    }


def _flag_counts(out: Outcome, attacker_ids: set[int]) -> None:
    """Flagged votes of the attacker and of the honest voters, with their reasons."""
    from arena.models import Vote

    out.attacker_flagged = out.honest_flagged = out.honest_total = 0
    for pk, flagged, flags in Vote.objects.values_list("id", "flagged", "flags"):
        attacker = pk in attacker_ids
        out.honest_total += not attacker
        if not flagged:
            continue
        reasons = out.attacker_flag_reasons if attacker else out.honest_flag_reasons
        for reason in flags or []:
            reasons[reason] = reasons.get(reason, 0) + 1
        if attacker:
            out.attacker_flagged += 1
        else:
            out.honest_flagged += 1


def _test_counts(out: Outcome, run: Any, attacker_ids: set[int]) -> None:
    """Attacker and honest votes of the voters and sources each anomaly test flagged."""
    from arena.models import Vote

    counted: set[int] = set()  # a session flagged alone and in its source counts once
    for row in run.voters.sort_values("p_value").itertuples():
        ids = set(Vote.objects.filter(voter_id__in=row.sessions).values_list("id", flat=True))
        ids -= counted
        counted |= ids
        attacker, honest = out.by_test.get(row.test, (0, 0))
        out.by_test[row.test] = (
            attacker + len(ids & attacker_ids),
            honest + len(ids - attacker_ids),
        )


def scenario(
    cfg: Config, shape: Shape, template: str, clf: StyleClassifier
) -> tuple[Outcome, Outcome]:
    """One attacker run on a copy of the honest arena, fitted with the defences off, then on."""
    from arena.models import Vote
    from ratings.cohorts import cohorts_quarantine_run
    from ratings.voters import voters_flag_run

    name = f"{template}_{shape.name}"
    _use_database("postgres")
    _admin(f'DROP DATABASE IF EXISTS "{name}"')
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    _use_database(name)
    from django.core.cache import cache

    cache.clear()
    off, on = Outcome(shape.name, "off"), Outcome(shape.name, "on")
    # The attacker reads the public leaderboard (honest votes only at this point).
    public = dict.fromkeys(clf.stats, 1000.0) | fit(defences=True)["ratings"]
    rng = random.Random(f"{cfg.seed}-{shape.name}")
    ids, refused = attacker_votes(cfg, shape, caps=True, public=public, clf=clf, rng=rng, out=off)
    t = cfg.target

    def rating(out: Outcome, attack: set[int], defences: bool) -> None:
        with_attack = fit(defences=defences)
        without = fit(defences=defences, exclude_ids=attack, honest_arena=True)
        if defences:
            from arena.models import Vote

            unflagged = set(Vote.objects.filter(flagged=False).values_list("id", flat=True))
            capped = unflagged - with_attack["ids"]
            out.attacker_capped = len(capped & attack)
            out.honest_capped = len(capped - attack)
        out.rating = {
            "rating_without": without["ratings"].get(t),
            "rating_with": with_attack["ratings"].get(t),
            "rank_without": without["position"].get(t),
            "rank_with": with_attack["position"].get(t),
            "n_models": len(with_attack["ratings"]),
        }

    # Defences off: every vote recorded is rated, flags ignored, no cap.
    off.accepted = len(ids)
    _flag_counts(off, set(ids))
    rating(off, set(ids), defences=False)
    # Defences on: the votes the caps refused never existed; flag_voters; unflagged votes rated.
    Vote.objects.filter(id__in=refused).delete()
    kept = set(ids) - set(refused)
    on.tried, on.seen_target = off.tried, off.seen_target
    on.target_battles, on.by_method = off.target_battles, off.by_method
    on.voted_target_right, on.voted_target_wrong = off.voted_target_right, off.voted_target_wrong
    on.accepted = len(kept)
    if refused:
        on.refused = {"vote_cap": len(refused)}
    run = voters_flag_run()
    cohorts = cohorts_quarantine_run(announce=False)  # what every refit runs first
    on.bursts = [
        f"{b.model} ({b.window_hours:.0f} h window, z {b.z_before:+.1f} -> {b.z_after:+.1f}, "
        f"{b.quarantined_votes} votes of {b.quarantined_sources} sources held out)"
        for b in cohorts.bursts
    ]
    _flag_counts(on, kept)
    _test_counts(on, run, kept)
    rating(on, kept, defences=True)
    _use_database("postgres")
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return off, on


def demo_honest_report() -> str:
    """What each defence does to the demo's real expert votes (honest by construction): flagged
    by the anomaly tests (a dry run), left out by the per-source bound and by the duplicate-prompt
    cap, flagged at recording (identity leaks and the other recording flags)."""
    from django.conf import settings

    from arena.models import Vote
    from arena.selectors import repeated_prompt_counts, source_capped_counts
    from ratings.selectors import source_cap
    from ratings.voters import voters_flag_run

    total = Vote.objects.count()
    run = voters_flag_run(dry_run=True)
    flagged_ids = set(
        Vote.objects.filter(voter_id__in=run.flagged_voter_ids).values_list("id", flat=True)
    )
    capped = source_capped_counts(cap=source_cap())
    repeated = repeated_prompt_counts(cap=settings.RATINGS_DUPLICATE_PROMPT_CAP)
    at_recording = Vote.objects.filter(flagged=True).count()
    from ratings.cohorts import cohorts_quarantine_run

    bursts = cohorts_quarantine_run(dry_run=True)

    def share(n: int) -> str:
        return f"{n} ({100 * n / max(total, 1):.1f}%)"

    return (
        f"The demo's {total} real expert votes: anomaly tests flag {share(len(flagged_ids))}; "
        f"the per-source bound leaves out {share(capped.votes)} (of {capped.sources} "
        f"source{'s' * (capped.sources != 1)}); the duplicate-prompt cap {share(repeated.votes)}; "
        f"the burst test holds out {share(len(bursts.quarantined_ids))} "
        f"({bursts.windows_tested} cohorts tested); "
        f"flags set at recording {share(at_recording)}."
    )


def _reasons(counts: dict[str, int]) -> str:
    return f" ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})" if counts else ""


def _verdict(o: Outcome) -> str:
    """The goal for a shape, with the defences on: at most 1 rank and 20 points of lift for
    (a) to (d); the naive attacker flagged with at least 90% of its votes; the adaptive (e) and
    (f) reported."""
    r = o.rating
    lift = (r["rating_with"] or 0) - (r["rating_without"] or 0)
    ranks = (r["rank_without"] or 0) - (r["rank_with"] or 0)
    if o.defences != "on":
        return ""
    if o.strategy in ("a", "b", "c", "d"):
        return "met" if lift <= 20 and ranks <= 1 else "MISSED"
    if o.strategy == "naive":
        return "met" if o.attacker_flagged >= 0.9 * o.tried else "MISSED"
    return "reported"


def _table(outcomes: list[Outcome], shapes: dict[str, Shape]) -> str:
    lines = [
        "| shape | defences | attacker votes tried | counted | attacker votes flagged "
        "| left out by the source bound (attacker / honest) "
        "| honest votes flagged | target rank without -> with | target rating without -> with "
        "| shift | goal |",
        "|---|---|---:|---:|---|---|---|---|---|---:|---|",
    ]
    for o in outcomes:
        r = o.rating
        shift = (r["rating_with"] or 0) - (r["rating_without"] or 0)
        if o.defences == "off":
            # Flags are set all the same (identity leaks, when the answer is saved): ignored here.
            attacker = f"ignored ({o.attacker_flagged} set)"
            honest = f"ignored ({o.honest_flagged} of {o.honest_total} set)"
            counted = f"{o.accepted}"
            bound = "off"
        else:
            attacker = f"{o.attacker_flagged}{_reasons(o.attacker_flag_reasons)}"
            honest = f"{o.honest_flagged} of {o.honest_total}{_reasons(o.honest_flag_reasons)}"
            kept = o.accepted - o.attacker_flagged - o.attacker_capped
            counted = f"{kept}{_reasons(o.refused).replace('(', '(refused: ')}"
            bound = f"{o.attacker_capped} / {o.honest_capped}"
        lines.append(
            f"| ({o.strategy}) {shapes[o.strategy].describe()} | {o.defences} | {o.tried} "
            f"| {counted} | {attacker} | {bound} | {honest} "
            f"| {r['rank_without']} -> {r['rank_with']} of {r['n_models']} "
            f"| {r['rating_without']:.0f} -> {r['rating_with']:.0f} | {shift:+.0f} "
            f"| {_verdict(o)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="fewer voters and votes")
    parser.add_argument("--target", default="gpt-3.5-turbo")
    parser.add_argument("--honest-sessions", type=int, default=120)
    parser.add_argument("--honest-votes", type=int, default=10)
    parser.add_argument(
        "--shapes",
        default="a,b,c,d,naive,e,f",
        help="which attack shapes to run (a,b,c,d,naive,e,f)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the template database")
    args = parser.parse_args()
    wanted = set(args.shapes.split(","))
    cfg = Config(
        seed=args.seed,
        honest_sessions=args.honest_sessions,
        honest_votes=args.honest_votes,
        shapes=tuple(s for s in (QUICK_SHAPES if args.quick else SHAPES) if s.name in wanted),
        target=args.target,
    )
    if args.quick:
        cfg.honest_sessions, cfg.honest_votes = 40, 10
    template = f"arena_bench_rigging_{cfg.seed}"
    _admin(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{template}"')
    started = time.monotonic()
    try:
        _setup_django(template)
        from django.core.management import call_command

        from arena.models import ArenaModel, Battle, Vote

        call_command("migrate", verbosity=0)
        call_command("load_demo", verbosity=0)
        honest_report = demo_honest_report()
        print(honest_report, flush=True)
        # The demo's imported human votes out: outcomes follow the seeded true ratings alone.
        Vote.objects.all().delete()
        Battle.objects.all().delete()
        rng = random.Random(cfg.seed)
        slugs = sorted(
            ArenaModel.objects.filter(is_active=True, completions__source="pool")
            .distinct()
            .values_list("slug", flat=True)
        )
        if cfg.target not in slugs:
            sys.exit(f"--target {cfg.target} is not among the demo's pool models: {slugs}")
        truth = _true_ratings(slugs, rng, cfg.target)
        clf = StyleClassifier()
        recognisable = recognisability_figures()
        n_honest = honest_votes(cfg, truth, rng)
        print(
            f"{len(slugs)} models, {n_honest} honest votes from {cfg.honest_sessions} sessions "
            f"({time.monotonic() - started:.0f} s); target {cfg.target}, true rating "
            f"{truth[cfg.target]:.0f} (true rank "
            f"{sorted(truth, key=lambda s: -truth[s]).index(cfg.target) + 1})",
            flush=True,
        )
        outcomes = []
        for shape in cfg.shapes:
            for outcome in scenario(cfg, shape, template, clf):
                outcomes.append(outcome)
                print(
                    f"({shape.name}) {shape.describe()}, defences {outcome.defences}: the target in "
                    f"{outcome.target_battles} of the attacker's battles; taken for it "
                    f"{outcome.seen_target} times ({outcome.voted_target_right} right, "
                    f"{outcome.voted_target_wrong} wrong; by {outcome.by_method}); "
                    f"{outcome.rating}",
                    flush=True,
                )
    finally:
        _use_database("postgres")
        if not args.keep:
            _admin(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
    print()
    print(
        f"Honest: {cfg.honest_sessions} sessions x {cfg.honest_votes} votes; target "
        f"{cfg.target}; seed {cfg.seed}; {time.monotonic() - started:.0f} s."
    )
    print(_table(outcomes, {s.name: s for s in cfg.shapes}))
    print()
    print(honest_report)
    print()
    print("Anomaly tests (defences on; a voter or source counted under its smallest p-value):")
    for o in outcomes:
        if o.defences == "on":
            tests = ", ".join(
                f"{t}: {a} attacker / {h} honest" for t, (a, h) in sorted(o.by_test.items())
            )
            print(f"- {o.strategy}: {tests or 'none flagged'}")
    print()
    print("Bursts held out by the burst test (defences on):")
    for o in outcomes:
        if o.defences == "on":
            print(f"- {o.strategy}: {'; '.join(o.bursts) or 'none'}")
    print_recognisability(recognisable)


# --- recognisability of the pool's answers ------------------------------------------------------


def recognisability_figures() -> tuple[list[Any], list[Any]]:
    """``arena.recognisability`` over the demo's pool: with the first variant of each answer
    only (no rotation: what the attacker has published), and with every variant (rotation)."""
    from arena.recognisability import recognisability
    from arena.transparency import pool_answers

    answers = pool_answers()
    seen: set[tuple[Any, str]] = set()
    first = []
    for answer in answers:
        if (answer.prompt, answer.model) not in seen:
            seen.add((answer.prompt, answer.model))
            first.append(answer)
    return recognisability(first), recognisability(answers)


def print_recognisability(figures: tuple[list[Any], list[Any]]) -> None:
    """The printed "Recognisability" section: per model, before -> after the rotation."""
    before, after = figures
    print()
    print(
        "Recognisability (arena.recognisability; before -> after the rotation of variants): "
        "share of a model's battle appearances recognised by the attacker's one published "
        "answer per prompt (exact text), attributed to it by a leave-one-prompt-out naive-Bayes "
        f"style classifier (chance {1 / max(1, len(after)):.0%}), naming it."
    )
    print("| model | answers | exact text | style | names it |")
    print("|---|---|---|---|---|")
    for old, new in zip(before, after, strict=True):

        def pct(value: float | None) -> str:
            return "-" if value is None else f"{value:.0%}"

        print(
            f"| {new.model} | {old.variants} -> {new.variants} "
            f"| {pct(old.exact_text)} -> {pct(new.exact_text)} "
            f"| {pct(old.style)} -> {pct(new.style)} "
            f"| {pct(old.names_model)} -> {pct(new.names_model)} |"
        )


if __name__ == "__main__":
    main()
