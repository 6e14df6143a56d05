"""Votes as training data: the formats preference trainers load.

One record per voted battle, built from the battle's current messages (a regenerated answer's
replacement, never the superseded one) and its vote. Five formats:

- ``arena``: the public Chatbot Arena schema (``question_id``, ``model_a``, ``model_b``,
  ``winner``, ``judge``, ``conversation_a``/``_b`` as role/content lists, ``turn``, ``anony``,
  ``language``, ``tstamp``, ``conv_metadata`` with the style counts), and ``source``: the
  battle's kind (``pool``, ``live``, ``mixed``: a pool prompt, one stored answer and one live,
  ``import``). Every vote, ties and "both bad" included; ``manage.py rate`` and
  ``ratings.engine`` read it back as they are.
- ``trl``: TRL's conversational preference format, ``prompt`` / ``chosen`` / ``rejected`` as
  message lists (``DPOTrainer``, ``RewardTrainer``). The prompt is the first user turn; in a
  multi-turn battle the follow-ups (the same text was sent to both models) sit inside
  ``chosen`` and ``rejected`` between each side's own answers.
- ``openai``: OpenAI's preference fine-tuning (DPO) JSONL, ``input.messages`` /
  ``preferred_output`` / ``non_preferred_output``. Its outputs are one assistant message each,
  so only one-turn battles can be written; multi-turn battles are skipped and counted.
- ``hh-rlhf``: Anthropic's HH-RLHF layout, ``chosen`` / ``rejected`` transcripts as
  ``"\\n\\nHuman: …\\n\\nAssistant: …"``.
- ``kto``: TRL's conversational unpaired preference format (``KTOTrainer``): ``prompt`` (the
  first user turn), ``completion`` (one side's answers, follow-ups between them as in ``trl``)
  and ``label``: the chosen answer ``true``, the rejected one ``false``; a "both bad" vote gives
  two ``false`` rows, a tie none.

``first_turn_only`` (``--first-turn-only``, ``?first_turn_only=1``) writes every format from the
first turn alone: the prompt is the first user turn and each side's answer the first one, with
no follow-up anywhere (OpenAI's format then holds multi-turn battles too; an ``arena`` row has
``turn`` 1 and, for a battle that went on, no style counts, which were counted over every
turn). The verdict was given on the whole conversation and is kept as the first answers'.

The three pairwise formats need a preferred side, so ties and "both bad" are skipped (and
counted). ``judge`` is a keyed hash of the pseudonymous voter id: stable across exports, so
one judge's votes can be grouped, but not the id the site stores; no IP hash leaves the site.

Exports stream: votes are read as plain values a chunk at a time (one query for the votes of a
chunk, one for their messages), JSONL is written a line at a time and Parquet a row group at a
time under a fixed Arrow schema per format, so memory stays flat however many votes there are.
``write_dataset`` writes a folder ``datasets.load_dataset`` reads as it is: the data file and a
dataset card (``README.md``) whose YAML header names the file, the licence and the features.
"""

from __future__ import annotations

import hmac
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import orjson
from django.conf import settings
from django.core.management.base import OutputWrapper
from django.db.models import Value
from django.utils.dateparse import parse_date, parse_datetime

from answer_style.schema import CONV_METADATA_KEYS
from arena.errors import ArenaError, ErrorCode
from arena.models import ArenaModel, Battle, BattleMessage, Prompt
from arena.payloads import Side, Winner
from arena.selectors import votes_for_export

if TYPE_CHECKING:
    import pyarrow as pa  # imported where used: Django's start-up does not pay for it

T = TypeVar("T")

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
    source: str = ""  # the battle's source (``Battle.Source``)


@dataclass
class ExportStats:
    """How many rows were written, from how many votes, and why the other votes were not."""

    written: int = 0  # rows
    votes: int = 0  # votes that gave rows (a kto vote gives two)
    skipped: Counter[str] = field(default_factory=Counter)
    first: float | None = None  # tstamp of the oldest vote written
    last: float | None = None  # ... and of the newest

    def summary(self) -> str:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        written = f"{self.written} written"
        if self.votes != self.written:
            written += f" from {self.votes} votes"
        return written + (f"; skipped: {reasons}" if reasons else "")


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
    source: str  # the battle's kind: pool, live, mixed or import


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


class KtoRow(TypedDict):
    prompt: list[Message]
    completion: list[Message]
    label: bool


ExportRow = ArenaRow | TrlRow | OpenAIRow | HhRlhfRow | KtoRow


def judge_hash(voter_id: str) -> str:
    """The pseudonymous judge id of a voter in exports: HMAC-SHA256 of the voter id, keyed by
    ``ARENA_JUDGE_HASH_KEY``, or by ``SECRET_KEY`` when that is empty (the key judge ids had
    before the setting existed, so exports keep their ids until it is set). With the setting,
    rotating the secret key leaves every judge id as it was."""
    key = str(settings.ARENA_JUDGE_HASH_KEY or settings.SECRET_KEY).encode()
    # hmac.digest: the one-shot C path, a fraction of hmac.new's cost on a million votes.
    return "judge-" + hmac.digest(key, voter_id.encode(), "sha256").hex()[:16]


# What an export reads of a vote: plain values, no model instances (a million of them would
# cost more than the rest of the export).
_VOTE_COLUMNS = (
    "battle_id",
    "winner",
    "voter_id",
    "created_at",
    "style",
    "battle__mode",
    "battle__model_a__slug",
    "battle__model_b__slug",
    "battle__prompt__language",
    "battle__prompt__category",
    "battle__source",
)
_MESSAGE_COLUMNS = ("battle_id", "turn", "side", "user_content", "content")
VoteValues = tuple[uuid.UUID, str, str, datetime, Any, str, str, str, str | None, str | None, str]
MessageValues = tuple[uuid.UUID, int, str, str, str]
#: Votes read (and their messages fetched) per query.
CHUNK_SIZE = 2000


def voted_battle(vote: VoteValues, messages: Iterable[MessageValues]) -> VotedBattle:
    """The record of one vote; ``messages`` are the battle's current (not superseded) ones.
    A vote read without its details has an empty ``judge`` and no style counts."""
    (battle_id, winner, voter_id, created_at, style, mode, slug_a, slug_b, language, category) = (
        vote[:10]
    )
    source = vote[10]
    turns: dict[int, str] = {}
    answers: dict[Side, dict[int, str]] = {"a": {}, "b": {}}
    for _, turn, side, user_content, content in messages:
        turns[turn] = user_content
        answers[cast(Side, side)][turn] = content
    order = sorted(turns)
    return VotedBattle(
        battle_id=battle_id.hex,
        model_a=slug_a,
        model_b=slug_b,
        winner=cast(Winner, winner),  # the column's choices are the Literal's values
        judge=judge_hash(voter_id) if voter_id else "",
        anonymous=mode == Battle.Mode.ANONYMOUS,
        language=language or "",
        category=category or "",
        tstamp=created_at.timestamp(),
        user_turns=[turns[t] for t in order],
        answers={side: [by_turn.get(t, "") for t in order] for side, by_turn in answers.items()},
        style=style or {},
        source=source,
    )


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def voted_battles(
    *, chunk_size: int = CHUNK_SIZE, details: bool = True, **filters: Any
) -> Iterator[VotedBattle]:
    """Every vote that ``selectors.votes_for_export(**filters)`` selects, oldest first.

    Two queries per ``chunk_size`` votes: the votes' values (from one server-side cursor on
    PostgreSQL) and the current messages of their battles. ``details=False`` leaves out what
    only the ``arena`` format writes (the judge and the style counts), which costs a JSON
    decoding and a hash a vote.
    """
    columns: tuple[str | Value, ...] = _VOTE_COLUMNS
    if not details:
        blank = {"voter_id": Value(""), "style": Value("")}  # "": no judge, no style counts
        columns = tuple(blank.get(c, c) for c in _VOTE_COLUMNS)
    votes = votes_for_export(**filters).prefetch_related(None).values_list(*columns)
    for chunk in _chunks(votes.iterator(chunk_size=chunk_size), chunk_size):
        by_battle: dict[uuid.UUID, list[MessageValues]] = {}
        current = (
            BattleMessage.objects.filter(
                battle_id__in=[vote[0] for vote in chunk], superseded_at__isnull=True
            )
            .order_by()
            .values_list(*_MESSAGE_COLUMNS)
        )
        for message in current:
            by_battle.setdefault(message[0], []).append(message)
        for vote in chunk:
            yield voted_battle(cast(VoteValues, vote), by_battle.get(vote[0], ()))


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
        "source": record.source,
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


def _prompt(record: VotedBattle) -> list[Message]:
    return [{"role": "user", "content": record.user_turns[0]}]


def to_trl(record: VotedBattle) -> TrlRow | str:
    sides = _sides(record)
    if isinstance(sides, str):
        return sides
    chosen, rejected = sides
    return {
        "prompt": _prompt(record),
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
        "input": {"messages": _prompt(record)},
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


def to_kto(record: VotedBattle) -> list[KtoRow] | str:
    """Two rows a vote: each side's answers with the verdict on them (both ``false`` when both
    were bad). A tie says neither answer was good or bad, so it gives none."""
    labelled: list[tuple[list[str], bool]]
    if record.winner == "tie (bothbad)":
        labelled = [(record.answers["a"], False), (record.answers["b"], False)]
    else:
        sides = _sides(record)
        if isinstance(sides, str):
            return "ties (no verdict on either answer)" if record.winner == "tie" else sides
        labelled = [(sides[0], True), (sides[1], False)]
    return [
        {
            "prompt": _prompt(record),
            "completion": _conversation(record.user_turns, answers)[1:],
            "label": label,
        }
        for answers, label in labelled
    ]


Shaper = Callable[[VotedBattle], ExportRow | list[KtoRow] | str]
SHAPERS: dict[str, Shaper] = {
    "arena": to_arena,
    "trl": to_trl,
    "openai": to_openai,
    "hh-rlhf": to_hh_rlhf,
    "kto": to_kto,
}
FORMATS = tuple(SHAPERS)  # what --format and ?format= accept

# What each format is for, in a dataset card: (the rows, the trainers that read them, tags).
_FORMAT_CARDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "arena": (
        "one row per vote in the public Chatbot Arena schema, ties and both-bad votes included",
        "`manage.py rate` and the arena's rating engine; any pairwise-comparison analysis",
        ("arena", "pairwise-comparison"),
    ),
    "trl": (
        "conversational preference pairs: `prompt`, `chosen`, `rejected` as message lists",
        "TRL's `DPOTrainer` and `RewardTrainer`",
        ("dpo", "reward-modeling"),
    ),
    "openai": (
        "OpenAI preference fine-tuning records: `input.messages`, `preferred_output`, "
        "`non_preferred_output`",
        "OpenAI's preference (DPO) fine-tuning",
        ("dpo",),
    ),
    "hh-rlhf": (
        "Anthropic HH-RLHF transcripts: `chosen`, `rejected` as Human/Assistant text",
        "trainers written for the HH-RLHF layout",
        ("rlhf", "reward-modeling"),
    ),
    "kto": (
        "conversational unpaired preference rows: `prompt`, `completion` (message lists) and a "
        "boolean `label` (the chosen answer true, the rejected one false, both false when both "
        "were bad)",
        "TRL's `KTOTrainer`",
        ("kto",),
    ),
}
assert set(_FORMAT_CARDS) == set(SHAPERS)


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


# A BCP 47-like language tag, as prompts store them ("en", "zh-Hant", "pt-BR").
_LANGUAGE = re.compile(r"[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*")


def _model_filter(models: Sequence[str]) -> list[str]:
    slugs = list(dict.fromkeys(slug.strip() for slug in models if slug.strip()))
    known = set(ArenaModel.objects.filter(slug__in=slugs).values_list("slug", flat=True))
    unknown = [slug for slug in slugs if slug not in known]
    if unknown:
        raise ArenaError(
            ErrorCode.INVALID,
            f"model names no model of this arena: {', '.join(unknown)} (give model slugs).",
            field="model",
        )
    return slugs


def _category_filter(category: str) -> str:
    if not Prompt.objects.filter(category=category).exists():
        known = (
            Prompt.objects.exclude(category="")
            .order_by("category")
            .values_list("category", flat=True)
            .distinct()[:30]
        )
        raise ArenaError(
            ErrorCode.INVALID,
            f"category {category!r} is no prompt's category; the categories are: "
            f"{', '.join(known) or 'none yet'}.",
            field="category",
        )
    return category


def export_options(
    params: Mapping[str, str], *, models: Sequence[str] = ()
) -> tuple[str, dict[str, Any]]:
    """The format and the selector's filters from query parameters (or the command's options).

    ``format`` (required: one of ``FORMATS``), ``include_named`` and ``include_flagged``
    (``1``/``true``/``yes``), ``since`` and ``until`` (ISO dates or datetimes), ``category``
    (one the prompts have) and ``language`` (a language tag); ``models`` are model slugs (a
    repeatable parameter, hence apart), each one this arena has.
    """
    fmt = params.get("format") or ""
    if fmt not in FORMATS:
        raise ArenaError(
            ErrorCode.INVALID, f"format must be one of {', '.join(FORMATS)}.", field="format"
        )
    filters: dict[str, Any] = {}
    for flag in ("include_named", "include_flagged"):
        filters[flag] = _flag(params, flag)
    for bound in ("since", "until"):
        if params.get(bound):
            filters[bound] = parse_moment(params[bound], field_name=bound)
    if slugs := _model_filter(models):
        filters["models"] = slugs
    if category := params.get("category") or "":
        filters["category"] = _category_filter(category)
    if language := params.get("language") or "":
        if len(language) > 20 or not _LANGUAGE.fullmatch(language):
            raise ArenaError(
                ErrorCode.INVALID,
                "language must be a language tag such as en or pt-BR.",
                field="language",
            )
        filters["language"] = language
    return fmt, filters


def first_turn(record: VotedBattle) -> VotedBattle:
    """The record as if the battle had stopped after its first turn. The vote's style counts
    cover every turn, so a battle that went on loses them."""
    if len(record.user_turns) <= 1:
        return record
    return replace(
        record,
        user_turns=record.user_turns[:1],
        answers={side: answers[:1] for side, answers in record.answers.items()},
        style={},
    )


def _flag(params: Mapping[str, str], name: str) -> bool:
    """A yes/no query parameter (absent: no), or a 400 naming it."""
    value = (params.get(name) or "").lower()
    if value not in _BOOLEANS:
        raise ArenaError(ErrorCode.INVALID, f"{name} must be 1 or 0.", field=name)
    return _BOOLEANS[value]


def first_turn_option(params: Mapping[str, str]) -> bool:
    """``first_turn_only`` of the query parameters (or the command's option)."""
    return _flag(params, "first_turn_only")


def export_rows(
    records: Iterable[VotedBattle],
    fmt: str,
    stats: ExportStats,
    *,
    first_turn_only: bool = False,
) -> Iterator[ExportRow]:
    """The rows of ``fmt`` (of the first turns alone with ``first_turn_only``); a vote the
    format cannot hold is counted in ``stats.skipped``."""
    shape = SHAPERS[fmt]
    for record in records:
        shaped = shape(first_turn(record) if first_turn_only else record)
        if isinstance(shaped, str):
            stats.skipped[shaped] += 1
            continue
        rows: list[ExportRow] = list(shaped) if isinstance(shaped, list) else [shaped]
        stats.votes += 1
        stats.written += len(rows)
        if stats.first is None:
            stats.first = record.tstamp
        stats.last = record.tstamp
        yield from rows


def jsonl_line(row: ExportRow) -> str:
    # orjson: a tenth of json.dumps's time on rows of long answers (UTF-8, not \u escapes).
    return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE).decode()


def write_jsonl(rows: Iterable[ExportRow], out: IO[str] | OutputWrapper) -> None:
    for row in rows:
        out.write(jsonl_line(row))


#: Rows per Parquet row group: the most rows an export holds in memory at once.
ROW_GROUP_SIZE = 2000
# Columns worth a Parquet dictionary: a few distinct values each. Answers and prompts are not
# (a dictionary of long texts that hardly repeat costs memory and saves nothing).
_DICTIONARY_COLUMNS = (
    "model_a",
    "model_b",
    "winner",
    "judge",
    "language",
    "category",
    "source",
)


@cache
def arrow_schema(fmt: str) -> pa.Schema:
    """The fixed Arrow schema of ``fmt``'s rows: every file of a format has the same columns
    and types, whatever the first rows hold (an all-null column is still a struct)."""
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    messages = pa.list_(message)
    counts = [
        (key, pa.int64() if parts is None else pa.struct([(p, pa.int64()) for p in parts]))
        for key, parts in CONV_METADATA_KEYS.items()
    ]
    fields: dict[str, list[tuple[str, pa.DataType]]] = {
        "arena": [
            ("question_id", pa.string()),
            ("model_a", pa.string()),
            ("model_b", pa.string()),
            ("winner", pa.string()),
            ("judge", pa.string()),
            ("conversation_a", messages),
            ("conversation_b", messages),
            ("turn", pa.int64()),
            ("anony", pa.bool_()),
            ("language", pa.string()),
            ("category", pa.string()),
            ("tstamp", pa.float64()),
            ("conv_metadata", pa.struct(counts)),
            ("source", pa.string()),
        ],
        "trl": [("prompt", messages), ("chosen", messages), ("rejected", messages)],
        "openai": [
            ("input", pa.struct([("messages", messages)])),
            ("preferred_output", messages),
            ("non_preferred_output", messages),
        ],
        "hh-rlhf": [("chosen", pa.string()), ("rejected", pa.string())],
        "kto": [("prompt", messages), ("completion", messages), ("label", pa.bool_())],
    }
    return pa.schema(fields[fmt])


def write_parquet(
    rows: Iterable[ExportRow], path: str | Path, fmt: str, *, row_group_size: int = ROW_GROUP_SIZE
) -> None:
    """The rows in one Parquet file under ``arrow_schema(fmt)``, a row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(fmt)
    dictionary = [name for name in _DICTIONARY_COLUMNS if name in schema.names]
    # Rows are converted to Arrow a few hundred at a time (the conversion's temporaries cost
    # several times the batch), and a row group is written from the batches it collected.
    step = max(1, min(row_group_size, 500))
    batches: list[pa.RecordBatch] = []
    # The system allocator for the export: mimalloc (pyarrow's default) kept 15-30 MB more
    # resident through a long write in bench/export.py, for no gain in speed.
    pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        with pq.ParquetWriter(str(path), schema, use_dictionary=dictionary) as writer:
            for chunk in _chunks(rows, step):
                batches.append(
                    pa.RecordBatch.from_pylist(cast(list[dict[str, Any]], chunk), schema=schema)
                )
                if sum(len(batch) for batch in batches) >= row_group_size:
                    table = pa.Table.from_batches(batches)
                    writer.write_table(table, row_group_size=row_group_size)
                    batches = []
            if batches:
                writer.write_table(pa.Table.from_batches(batches), row_group_size=row_group_size)
    finally:
        pa.set_memory_pool(pool)


def _hf_feature(name: str, kind: pa.DataType) -> dict[str, Any]:
    """One column as the hub's ``dataset_info.features`` YAML spells it."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return {"name": name, "struct": [_hf_feature(f.name, f.type) for f in kind.fields]}
    if pa.types.is_list(kind):
        inner = kind.value_type
        if pa.types.is_struct(inner):
            return {"name": name, "list": [_hf_feature(f.name, f.type) for f in inner.fields]}
        return {"name": name, "list": _hf_feature("", inner)["dtype"]}
    dtypes = {pa.string(): "string", pa.bool_(): "bool", pa.int64(): "int64"}
    return {"name": name, "dtype": dtypes.get(kind, "float64")}


# A YAML scalar that needs no quotes (and is no boolean, number or null to YAML).
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.<>/-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def _scalar(value: Any) -> str:
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value, ensure_ascii=False)  # JSON scalars are YAML as they are


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """Block YAML of nested dicts and lists (the hub's card header; no YAML library needed)."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"{pad}{_scalar(key)}:")
                lines.extend(_yaml(item, indent + 2))
            else:
                lines.append(f"{pad}{_scalar(key)}: {_scalar(item)}")
    else:
        for item in value:
            nested = _yaml(item, indent + 2) if isinstance(item, dict | list) else None
            if nested:
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines.extend(nested[1:])
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    return lines


def _size_category(rows: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if rows < limit:
            return name
    return "100K<n<1M" if rows < 1_000_000 else "1M<n<10M"


def _moment(tstamp: float | None) -> str:
    return "–" if tstamp is None else datetime.fromtimestamp(tstamp, UTC).isoformat()


def dataset_card(
    fmt: str, data_file: str, stats: ExportStats, filters: Mapping[str, Any], *, license: str
) -> str:
    """The ``README.md`` of an export folder: the YAML header the Hugging Face hub and
    ``datasets.load_dataset`` read (licence, task, tags, the file as the ``train`` split, its
    features) and a body saying what the rows are, how many, and what was left out."""
    rows, trainers, tags = _FORMAT_CARDS[fmt]
    header = {
        "license": license,
        "task_categories": ["text-generation", "reinforcement-learning"],
        "tags": ["human-feedback", "preference", *tags],
        "size_categories": [_size_category(stats.written)],
        "pretty_name": f"Arena votes ({fmt})",
        "configs": [
            {"config_name": "default", "data_files": [{"split": "train", "path": data_file}]}
        ],
        "dataset_info": {"features": [_hf_feature(f.name, f.type) for f in arrow_schema(fmt)]},
    }
    chosen = [
        f"- {name}: {filters[key]}"
        for key, name in (("category", "prompt category"), ("language", "prompt language"))
        if filters.get(key)
    ]
    if filters.get("models"):
        chosen.append(f"- battles with one of the models: {', '.join(filters['models'])}")
    for key, name in (("since", "votes at or after"), ("until", "votes before")):
        if filters.get(key):
            chosen.append(f"- {name} {filters[key].isoformat()}")
    chosen.append(
        "- battles: "
        + ("anonymous and named" if filters.get("include_named") else "anonymous only")
        + "; votes: "
        + ("flagged ones included" if filters.get("include_flagged") else "unflagged only")
    )
    if filters.get("first_turn_only"):
        chosen.append("- turns: the first only (the first user turn and the first answers)")
    skipped = [f"- {n} {why}" for why, n in sorted(stats.skipped.items())] or ["- none"]
    body = [
        f"# Arena votes: `{fmt}` format",
        "",
        "Human preference votes from a self-hosted arena: a visitor read two anonymous models'",
        "answers to the same prompt and voted for the better one, a tie, or both bad.",
        "",
        f"Rows: {rows}.",
        "",
        f"For: {trainers}.",
        "",
        "Each battle's current answers are used (a regenerated answer, never the one it",
        "replaced); judges are keyed hashes of pseudonymous voter ids.",
        "",
        f"- file: `{data_file}` (split `train`)",
        f"- rows: {stats.written}, from {stats.votes} votes",
        f"- votes from {_moment(stats.first)} to {_moment(stats.last)} (UTC)",
        f"- written {datetime.now(UTC).isoformat(timespec='seconds')}",
        "",
        "Filters:",
        "",
        *chosen,
        "",
        "Votes skipped (the format cannot hold them):",
        "",
        *skipped,
        "",
        "```python",
        "import datasets",
        "",
        'rows = datasets.load_dataset("path/to/this/folder", split="train")',
        "```",
        "",
        f"Licence: {license}. Model outputs are also subject to the terms of the providers that",
        "produced them.",
    ]
    return "---\n" + "\n".join(_yaml(header)) + "\n---\n\n" + "\n".join(body) + "\n"


#: The licence of an export folder's card unless the command is told another: the arena's
#: demo votes are CC-BY-4.0 (MT-bench human judgments), and visitors agree that their votes
#: may be published as an open data set.
VOTES_LICENSE = "cc-by-4.0"


def write_dataset(
    rows: Iterable[ExportRow],
    folder: Path,
    fmt: str,
    *,
    stats: ExportStats,
    filters: Mapping[str, Any],
    parquet: bool = False,
    license: str = VOTES_LICENSE,
) -> Path:
    """The rows as ``folder/arena-votes-<fmt>.jsonl`` (or ``.parquet``) and its dataset card
    ``folder/README.md``; returns the data file's path. Both are written aside and moved into
    place, the card last, so a failed export leaves neither half-written."""
    data = folder / f"arena-votes-{fmt}.{'parquet' if parquet else 'jsonl'}"
    card = folder / "README.md"
    partial_data = data.with_name(data.name + ".partial")
    partial_card = card.with_name(card.name + ".partial")
    try:
        if parquet:
            write_parquet(rows, partial_data, fmt)
        else:
            with partial_data.open("w", encoding="utf-8") as handle:
                write_jsonl(rows, handle)
        partial_card.write_text(
            dataset_card(fmt, data.name, stats, filters, license=license), encoding="utf-8"
        )
        partial_data.replace(data)
        partial_card.replace(card)
    finally:
        partial_data.unlink(missing_ok=True)
        partial_card.unlink(missing_ok=True)
    return data
