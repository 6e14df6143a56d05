"""Votes as training data: the formats preference trainers load.

One record per voted battle, built from the battle's current messages (a regenerated answer's
replacement, never the superseded one) and its vote. Four formats:

- ``arena``: the public Chatbot Arena schema (``question_id``, ``model_a``, ``model_b``,
  ``winner``, ``judge``, ``conversation_a``/``_b`` as role/content lists, ``turn``, ``anony``,
  ``language``, ``tstamp``, ``conv_metadata`` with the style counts). Every vote, ties and
  "both bad" included; ``manage.py rate`` and ``ratings.engine`` read it back as they are.
- ``trl``: TRL's conversational preference format, ``prompt`` / ``chosen`` / ``rejected`` as
  message lists (``DPOTrainer``, ``RewardTrainer``). The prompt is the first user turn; in a
  multi-turn battle the follow-ups (the same text was sent to both models) sit inside
  ``chosen`` and ``rejected`` between each side's own answers.
- ``openai``: OpenAI's preference fine-tuning (DPO) JSONL, ``input.messages`` /
  ``preferred_output`` / ``non_preferred_output``. Its outputs are one assistant message each,
  so only one-turn battles can be written; multi-turn battles are skipped and counted.
- ``hh-rlhf``: Anthropic's HH-RLHF layout, ``chosen`` / ``rejected`` transcripts as
  ``"\\n\\nHuman: …\\n\\nAssistant: …"``.

The three pairwise formats need a preferred side, so ties and "both bad" are skipped (and
counted). ``judge`` is a keyed hash of the pseudonymous voter id: stable across exports, so
one judge's votes can be grouped, but not the id the site stores; no IP hash leaves the site.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, TypedDict, cast

from django.conf import settings
from django.core.management.base import OutputWrapper
from django.utils.dateparse import parse_date, parse_datetime

from arena.errors import ArenaError, ErrorCode
from arena.models import Battle, BattleMessage, Vote
from arena.payloads import Side, Winner
from arena.selectors import votes_for_export

_BOOLEANS = {
    "": False,
    "0": False,
    "false": False,
    "no": False,
    "1": True,
    "true": True,
    "yes": True,
}
# The verdicts with a preferred side: (chosen side, rejected side).
PAIRWISE: dict[Winner, tuple[Side, Side]] = {"model_a": ("a", "b"), "model_b": ("b", "a")}


@dataclass(frozen=True)
class VotedBattle:
    """What every format is made from: one vote and the conversation both sides had."""

    battle_id: str
    model_a: str
    model_b: str
    winner: Winner
    judge: str
    anonymous: bool
    language: str
    category: str
    tstamp: float
    user_turns: list[str]
    answers: dict[Side, list[str]]  # side -> assistant turns, in order
    style: dict[str, Any]


@dataclass
class ExportStats:
    """How many votes were written, and why the others were not."""

    written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        return f"{self.written} written" + (f"; skipped: {reasons}" if reasons else "")


class Message(TypedDict):
    role: str  # "user" or "assistant"
    content: str


class ArenaRow(TypedDict):
    """A row of the ``arena`` format (the public Chatbot Arena schema)."""

    question_id: str
    model_a: str
    model_b: str
    winner: Winner
    judge: str
    conversation_a: list[Message]
    conversation_b: list[Message]
    turn: int
    anony: bool
    language: str
    category: str
    tstamp: float
    conv_metadata: dict[str, Any] | None  # answer_style.conv_metadata's counts


class TrlRow(TypedDict):
    prompt: list[Message]
    chosen: list[Message]
    rejected: list[Message]


class OpenAIInput(TypedDict):
    messages: list[Message]


class OpenAIRow(TypedDict):
    input: OpenAIInput
    preferred_output: list[Message]
    non_preferred_output: list[Message]


class HhRlhfRow(TypedDict):
    chosen: str
    rejected: str


ExportRow = ArenaRow | TrlRow | OpenAIRow | HhRlhfRow


def judge_hash(voter_id: str) -> str:
    """The pseudonymous judge id of a voter in exports: HMAC-SHA256 of the voter id, keyed by
    ``ARENA_JUDGE_HASH_KEY``, or by ``SECRET_KEY`` when that is empty (the key judge ids had
    before the setting existed, so exports keep their ids until it is set). With the setting,
    rotating the secret key leaves every judge id as it was."""
    key = str(settings.ARENA_JUDGE_HASH_KEY or settings.SECRET_KEY).encode()
    digest = hmac.new(key, voter_id.encode(), hashlib.sha256)
    return "judge-" + digest.hexdigest()[:16]


def voted_battle(vote: Vote, messages: Iterable[BattleMessage]) -> VotedBattle:
    """The record of one vote; ``messages`` are the battle's current (not superseded) ones."""
    battle: Battle = vote.battle
    turns: dict[int, str] = {}
    answers: dict[Side, dict[int, str]] = {"a": {}, "b": {}}
    for message in messages:
        turns[message.turn] = message.user_content
        answers[cast(Side, message.side)][message.turn] = message.content
    order = sorted(turns)
    prompt = battle.prompt
    return VotedBattle(
        battle_id=battle.pk.hex,
        model_a=battle.model_a.slug,
        model_b=battle.model_b.slug,
        winner=cast(Winner, vote.winner),  # the column's choices are the Literal's values
        judge=judge_hash(vote.voter_id),
        anonymous=battle.mode == Battle.Mode.ANONYMOUS,
        language=(prompt.language if prompt else "") or "",
        category=(prompt.category if prompt else "") or "",
        tstamp=vote.created_at.timestamp(),
        user_turns=[turns[t] for t in order],
        answers={side: [by_turn.get(t, "") for t in order] for side, by_turn in answers.items()},
        style=vote.style or {},
    )


def _conversation(user_turns: list[str], answers: list[str]) -> list[Message]:
    messages: list[Message] = []
    for question, answer in zip(user_turns, answers, strict=True):
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer})
    return messages


def to_arena(record: VotedBattle) -> ArenaRow | str:
    return {
        "question_id": record.battle_id,
        "model_a": record.model_a,
        "model_b": record.model_b,
        "winner": record.winner,
        "judge": record.judge,
        "conversation_a": _conversation(record.user_turns, record.answers["a"]),
        "conversation_b": _conversation(record.user_turns, record.answers["b"]),
        "turn": len(record.user_turns),
        "anony": record.anonymous,
        "language": record.language,
        "category": record.category,
        "tstamp": record.tstamp,
        "conv_metadata": record.style or None,
    }


def _sides(record: VotedBattle) -> tuple[list[str], list[str]] | str:
    """(chosen answers, rejected answers), or why the vote has no preferred side."""
    if record.winner not in PAIRWISE:
        return "ties and both-bad votes (no preferred side)"
    chosen, rejected = PAIRWISE[record.winner]
    if not all(text.strip() for text in record.answers[chosen]):
        # An empty rejected answer is a fair negative; an empty chosen one teaches nothing.
        return "votes for an empty answer"
    return record.answers[chosen], record.answers[rejected]


def to_trl(record: VotedBattle) -> TrlRow | str:
    sides = _sides(record)
    if isinstance(sides, str):
        return sides
    chosen, rejected = sides
    prompt: list[Message] = [{"role": "user", "content": record.user_turns[0]}]
    return {
        "prompt": prompt,
        "chosen": _conversation(record.user_turns, chosen)[1:],
        "rejected": _conversation(record.user_turns, rejected)[1:],
    }


def to_openai(record: VotedBattle) -> OpenAIRow | str:
    sides = _sides(record)
    if isinstance(sides, str):
        return sides
    if len(record.user_turns) != 1:
        return "multi-turn battles (OpenAI's outputs are one message)"
    chosen, rejected = sides
    return {
        "input": {"messages": [{"role": "user", "content": record.user_turns[0]}]},
        "preferred_output": [{"role": "assistant", "content": chosen[0]}],
        "non_preferred_output": [{"role": "assistant", "content": rejected[0]}],
    }


def _transcript(user_turns: list[str], answers: list[str]) -> str:
    return "".join(
        f"\n\nHuman: {q}\n\nAssistant: {a}" for q, a in zip(user_turns, answers, strict=True)
    )


def to_hh_rlhf(record: VotedBattle) -> HhRlhfRow | str:
    sides = _sides(record)
    if isinstance(sides, str):
        return sides
    chosen, rejected = sides
    return {
        "chosen": _transcript(record.user_turns, chosen),
        "rejected": _transcript(record.user_turns, rejected),
    }


SHAPERS: dict[str, Callable[[VotedBattle], ExportRow | str]] = {
    "arena": to_arena,
    "trl": to_trl,
    "openai": to_openai,
    "hh-rlhf": to_hh_rlhf,
}
FORMATS = tuple(SHAPERS)  # what --format and ?format= accept


def parse_moment(value: str, *, field_name: str) -> datetime:
    """An ISO date (midnight UTC) or datetime (UTC when it names no zone), in UTC.

    A moment that is not a UTC datetime (0001-01-01 to 9999-12-31) is refused here, before an
    export starts: ``0001-01-01T00:00:00+05:00`` is a time in year 0 in UTC, which a database
    driver would fail to convert only once the query runs, halfway through a download.
    """
    try:
        moment = parse_datetime(value)
        day = parse_date(value) if moment is None and len(value) == 10 else None
    except (ValueError, OverflowError):  # well formed but not a real date or time
        moment = day = None
    if day is not None:
        moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
    if moment is None:
        raise ArenaError(
            ErrorCode.INVALID,
            f"{field_name} must be an ISO date or datetime, e.g. 2026-11-30.",
            field=field_name,
        )
    try:
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ArenaError(
            ErrorCode.INVALID,
            f"{field_name} is outside the calendar in UTC (0001-01-01 to 9999-12-31).",
            field=field_name,
        ) from None


def export_options(params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The format and the selector's filters from query parameters (or the command's options).

    ``format`` (required: one of ``FORMATS``), ``include_named`` and ``include_flagged``
    (``1``/``true``/``yes``), ``since`` and ``until`` (ISO dates or datetimes).
    """
    fmt = params.get("format") or ""
    if fmt not in FORMATS:
        raise ArenaError(
            ErrorCode.INVALID, f"format must be one of {', '.join(FORMATS)}.", field="format"
        )
    filters: dict[str, Any] = {}
    for flag in ("include_named", "include_flagged"):
        value = (params.get(flag) or "").lower()
        if value not in _BOOLEANS:
            raise ArenaError(ErrorCode.INVALID, f"{flag} must be 1 or 0.", field=flag)
        filters[flag] = _BOOLEANS[value]
    for bound in ("since", "until"):
        if params.get(bound):
            filters[bound] = parse_moment(params[bound], field_name=bound)
    return fmt, filters


def voted_battles(**filters: Any) -> Iterator[VotedBattle]:
    """Every vote that ``selectors.votes_for_export(**filters)`` selects, oldest first."""
    for vote in votes_for_export(**filters).iterator(chunk_size=500):
        # ``current_messages`` is the selector's prefetch (to_attr), unknown to the model.
        yield voted_battle(vote, vote.battle.current_messages)  # type: ignore[attr-defined]


def export_rows(
    records: Iterable[VotedBattle], fmt: str, stats: ExportStats
) -> Iterator[ExportRow]:
    """The rows of ``fmt``; a vote the format cannot hold is counted in ``stats.skipped``."""
    shape = SHAPERS[fmt]
    for record in records:
        row = shape(record)
        if isinstance(row, str):
            stats.skipped[row] += 1
            continue
        stats.written += 1
        yield row


def jsonl_line(row: ExportRow) -> str:
    return json.dumps(row, ensure_ascii=False) + "\n"


def write_jsonl(rows: Iterable[ExportRow], out: IO[str] | OutputWrapper) -> None:
    for row in rows:
        out.write(jsonl_line(row))


def write_parquet(rows: Iterable[ExportRow], path: str) -> None:
    """All rows in one Parquet file (nested lists and structs as Arrow types)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows))
    pq.write_table(table, path)
