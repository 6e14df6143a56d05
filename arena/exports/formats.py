"""The seven formats: each shapes a ``VotedBattle`` into its rows, or names why it cannot.

A battle on a prompt with images is written where the format holds images: ``arena`` (an
``images`` column on every row, empty for a text prompt) and ``trl-vision`` (TRL's vision
preference layout, image battles only). The text-only formats skip it and count it: a prompt
that says "what is in this picture?" without the picture would teach the wrong thing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any, TypedDict

from answer_style.schema import CONV_METADATA_KEYS
from arena.exports.records import ExportStats, ImageRef, ReactionValue, VotedBattle, first_turn
from arena.payloads import Side, Winner

if TYPE_CHECKING:
    import pyarrow as pa  # imported where used: Django's start-up does not pay for it

# The verdicts with a preferred side: (chosen side, rejected side).
PAIRWISE: dict[Winner, tuple[Side, Side]] = {"model_a": ("a", "b"), "model_b": ("b", "a")}


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
    # The visitor's thumbs up or down on each side's answers, with reason tags (None: no
    # reaction on that side; the column is None when neither side has one).
    reactions: ArenaReactions | None
    # The prompt's images, sent with its first user turn (empty for a text prompt): a data URL
    # each in JSONL, ``datasets``' ``Image`` feature in Parquet (``records.ImageRef``).
    images: list[ImageRef]


class ArenaReactions(TypedDict):
    a: ReactionValue | None
    b: ReactionValue | None


class TrlRow(TypedDict):
    prompt: list[Message]
    chosen: list[Message]
    rejected: list[Message]


class TrlVisionRow(TrlRow):
    """TRL's vision preference layout: ``trl``'s columns and the prompt's ``images``, which TRL
    puts before the first user message (``DataCollatorForVisionPreference``)."""

    images: list[ImageRef]


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


class KtoReactionRow(KtoRow):
    """A ``kto`` row whose label is the visitor's own thumbs up or down on that answer."""

    model: str
    tags: list[str]
    after_reveal: bool


ExportRow = ArenaRow | TrlRow | TrlVisionRow | OpenAIRow | HhRlhfRow | KtoRow | KtoReactionRow


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
        "reactions": (
            {"a": record.reactions.get("a"), "b": record.reactions.get("b")}
            if record.reactions
            else None
        ),
        "images": list(record.images),
    }


def _sides(record: VotedBattle) -> tuple[list[str], list[str]] | str:
    """(chosen answers, rejected answers), or why the vote has no preferred side."""
    if record.winner not in PAIRWISE:
        return NO_SIDE
    chosen, rejected = PAIRWISE[record.winner]
    if not all(text.strip() for text in record.answers[chosen]):
        # An empty rejected answer is a fair negative; an empty chosen one teaches nothing.
        return EMPTY
    return record.answers[chosen], record.answers[rejected]


def _prompt(record: VotedBattle) -> list[Message]:
    return [{"role": "user", "content": record.user_turns[0]}]


def _trl_text(record: VotedBattle) -> TrlRow | str:
    sides = _sides(record)
    if isinstance(sides, str):
        return sides
    chosen, rejected = sides
    return {
        "prompt": _prompt(record),
        "chosen": _conversation(record.user_turns, chosen)[1:],
        "rejected": _conversation(record.user_turns, rejected)[1:],
    }


def to_trl_vision(record: VotedBattle) -> TrlVisionRow | str:
    if not record.images:
        return NO_IMAGE
    shaped = _trl_text(record)
    if isinstance(shaped, str):
        return shaped
    return {"images": list(record.images), **shaped}


def to_openai(record: VotedBattle) -> OpenAIRow | str:
    sides = _sides(record)
    if isinstance(sides, str):
        return sides
    if len(record.user_turns) != 1:
        return MULTI_TURN
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
            return TIE if record.winner == "tie" else sides
        labelled = [(sides[0], True), (sides[1], False)]
    return [
        {
            "prompt": _prompt(record),
            "completion": _conversation(record.user_turns, answers)[1:],
            "label": label,
        }
        for answers, label in labelled
    ]


def to_kto_reactions(record: VotedBattle) -> list[KtoReactionRow] | str:
    """One row per reaction: that side's answers labelled by the visitor's own thumbs (up
    true, down false), with the model, the reason tags and whether the names were known."""
    if not record.reactions:
        return NO_REACTION
    models = {"a": record.model_a, "b": record.model_b}
    return [
        {
            "prompt": _prompt(record),
            "completion": _conversation(record.user_turns, record.answers[side])[1:],
            "label": reaction["liked"],
            "model": models[side],
            "tags": reaction["tags"],
            "after_reveal": reaction["after_reveal"],
        }
        for side, reaction in sorted(record.reactions.items())
    ]


#: Why a text-only format skips a battle whose prompt has images.
# Why a vote is left out of a format, as the dataset card counts it (the COPY path,
# ``arena.exports.pgcopy``, returns the same).
NO_SIDE = "ties and both-bad votes (no preferred side)"
EMPTY = "votes for an empty answer"
NO_IMAGE = "battles without an image (the format is for vision models; use trl)"
MULTI_TURN = "multi-turn battles (OpenAI's outputs are one message)"
TIE = "ties (no verdict on either answer)"
NO_REACTION = "votes without a reaction"
TEXT_ONLY = "image battles (the format holds text only; use arena or trl-vision)"


def to_trl(record: VotedBattle) -> TrlRow | str:
    return TEXT_ONLY if record.images else _trl_text(record)


Shaper = Callable[[VotedBattle], ExportRow | list[KtoRow] | list[KtoReactionRow] | str]


def _text_only(shape: Shaper) -> Shaper:
    def shaped(record: VotedBattle) -> ExportRow | list[KtoRow] | list[KtoReactionRow] | str:
        return TEXT_ONLY if record.images else shape(record)

    shaped.__doc__ = shape.__doc__
    return shaped


SHAPERS: dict[str, Shaper] = {
    "arena": to_arena,
    "trl": to_trl,
    "trl-vision": to_trl_vision,
    "openai": _text_only(to_openai),
    "hh-rlhf": _text_only(to_hh_rlhf),
    "kto": _text_only(to_kto),
    "kto-reactions": _text_only(to_kto_reactions),
}
#: The formats whose rows hold images (an ``images`` column).
IMAGE_FORMATS = ("arena", "trl-vision")
FORMATS = tuple(SHAPERS)  # what --format and ?format= accept

# What each format is for, in a dataset card: (the rows, the trainers that read them, tags).
FORMAT_CARDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
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
    "trl-vision": (
        "TRL's vision preference layout: `images` (the prompt's images), `prompt`, `chosen`, "
        "`rejected` as message lists; battles on prompts with images only",
        "TRL's `DPOTrainer` with a vision-language model and its processor",
        ("dpo", "vision", "image-text-to-text"),
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
    "kto-reactions": (
        "the visitors' own thumbs up or down on single answers: `prompt`, `completion` and a "
        "boolean `label` as in `kto`, with the `model`, the reason `tags` and `after_reveal` "
        "(the reaction came once the names were known)",
        "TRL's `KTOTrainer` (the extra columns are ignored); per-answer quality analysis",
        ("kto", "human-feedback"),
    ),
}
assert set(FORMAT_CARDS) == set(SHAPERS)


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


def arrow_image() -> pa.DataType:
    """An image in Parquet: ``datasets``' ``Image`` storage (the file's bytes and a name)."""
    import pyarrow as pa

    return pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def json_image() -> pa.DataType:
    """An image in JSONL (``records.JsonImage``), as the dataset card declares it."""
    import pyarrow as pa

    return pa.struct(
        [
            ("url", pa.string()),
            ("sha256", pa.string()),
            ("mime", pa.string()),
            ("width", pa.int64()),
            ("height", pa.int64()),
        ]
    )


@cache
def arrow_schema(fmt: str, *, jsonl: bool = False) -> pa.Schema:
    """The fixed Arrow schema of ``fmt``'s rows: every file of a format has the same columns
    and types, whatever the first rows hold (an all-null column is still a struct). Images
    are ``arrow_image`` structs, or ``json_image`` ones for the JSONL file's card (``jsonl``).
    The Parquet schema carries ``datasets``' features in its metadata, so that its images load
    as images from the file alone."""
    import pyarrow as pa

    images = pa.list_(json_image() if jsonl else arrow_image())
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    messages = pa.list_(message)
    reaction = pa.struct(
        [("liked", pa.bool_()), ("tags", pa.list_(pa.string())), ("after_reveal", pa.bool_())]
    )
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
            ("reactions", pa.struct([("a", reaction), ("b", reaction)])),
            ("images", images),
        ],
        "trl": [("prompt", messages), ("chosen", messages), ("rejected", messages)],
        "trl-vision": [
            ("images", images),
            ("prompt", messages),
            ("chosen", messages),
            ("rejected", messages),
        ],
        "openai": [
            ("input", pa.struct([("messages", messages)])),
            ("preferred_output", messages),
            ("non_preferred_output", messages),
        ],
        "hh-rlhf": [("chosen", pa.string()), ("rejected", pa.string())],
        "kto": [("prompt", messages), ("completion", messages), ("label", pa.bool_())],
        "kto-reactions": [
            ("prompt", messages),
            ("completion", messages),
            ("label", pa.bool_()),
            ("model", pa.string()),
            ("tags", pa.list_(pa.string())),
            ("after_reveal", pa.bool_()),
        ],
    }
    schema = pa.schema(fields[fmt])
    if fmt in IMAGE_FORMATS and not jsonl:
        features = {f.name: _hf_feature_json(f.type) for f in schema}
        info = {"info": {"features": features}}
        schema = schema.with_metadata({"huggingface": json.dumps(info)})
    return schema


def _hf_feature_json(kind: pa.DataType) -> Any:
    """A column's type as ``datasets`` stores its features in a Parquet file's metadata."""
    import pyarrow as pa

    if kind == arrow_image():
        return {"_type": "Image"}
    if pa.types.is_struct(kind):
        return {f.name: _hf_feature_json(f.type) for f in kind.fields}
    if pa.types.is_list(kind):
        return {"_type": "List", "feature": _hf_feature_json(kind.value_type)}
    names = {pa.string(): "string", pa.bool_(): "bool", pa.int64(): "int64", pa.binary(): "binary"}
    return {"_type": "Value", "dtype": names.get(kind, "float64")}
