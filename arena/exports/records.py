"""Reading votes for an export: one ``VotedBattle`` per vote, from plain values a chunk at a time
(one query for a chunk's votes, one for their battles' current messages, one for their
reactions, and one for their prompts' images when a prompt of the chunk has any), so memory
stays flat however many votes there are."""

from __future__ import annotations

import base64
import hmac
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import islice
from typing import Any, TypedDict, TypeVar, cast

from django.conf import settings
from django.core.files.storage import default_storage
from django.db.models import Value

from arena.models import Battle, BattleMessage, PromptImage, Reaction
from arena.payloads import Side, Winner
from arena.selectors import votes_for_export

T = TypeVar("T")


class ReactionValue(TypedDict):
    liked: bool
    tags: list[str]
    after_reveal: bool  # given once the names were known


class JsonImage(TypedDict):
    """An image as a JSONL row holds it: the file as a data URL, with what it is."""

    url: str  # data:<mime>;base64,...
    sha256: str
    mime: str
    width: int
    height: int


class ArrowImage(TypedDict):
    """An image as a Parquet row holds it: the layout of ``datasets``' ``Image`` feature."""

    bytes: bytes
    path: str  # <sha256>.<extension>: a name, not a place to read


@dataclass(frozen=True)
class ImageRef:
    """A prompt's image in an export: the stored file's name and what it is. The bytes are
    read when a row is written (``as_json``, ``as_arrow``), one image at a time."""

    name: str  # in ``default_storage``
    sha256: str
    mime: str
    width: int
    height: int

    def read(self) -> bytes:
        with default_storage.open(self.name, "rb") as stored:
            data: bytes = stored.read()
        return data

    def as_json(self) -> JsonImage:
        encoded = base64.b64encode(self.read()).decode("ascii")
        return {
            "url": f"data:{self.mime};base64,{encoded}",
            "sha256": self.sha256,
            "mime": self.mime,
            "width": self.width,
            "height": self.height,
        }

    def as_arrow(self) -> ArrowImage:
        extension = "png" if self.mime == "image/png" else "jpg"
        return {"bytes": self.read(), "path": f"{self.sha256}.{extension}"}


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
    # side -> the visitor's reaction on that side's answers, for the sides they reacted to
    reactions: dict[Side, ReactionValue] = field(default_factory=dict)
    # The prompt's images, in order (sent with the first user turn); empty for a text prompt.
    images: tuple[ImageRef, ...] = ()


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
    "battle__prompt_id",
    "battle__prompt__image_count",
)
_MESSAGE_COLUMNS = ("battle_id", "turn", "side", "user_content", "content")
VoteValues = tuple[
    uuid.UUID, str, str, datetime, Any, str, str, str, str | None, str | None, str, int | None, int
]
MessageValues = tuple[uuid.UUID, int, str, str, str]
_REACTION_COLUMNS = ("battle_id", "side", "liked", "tags", "after_reveal")
ReactionValues = tuple[uuid.UUID, str, bool, list[str], bool]
_IMAGE_COLUMNS = ("prompt_id", "file", "sha256", "mime", "width", "height")
ImageValues = tuple[int, str, str, str, int, int]
#: Votes read (and their messages fetched) per query.
CHUNK_SIZE = 2000


def voted_battle(
    vote: VoteValues,
    messages: Iterable[MessageValues],
    reactions: Iterable[ReactionValues] = (),
    images: Iterable[ImageValues] = (),
) -> VotedBattle:
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
        reactions={
            cast(Side, side): {"liked": liked, "tags": list(tags or []), "after_reveal": late}
            for _, side, liked, tags, late in reactions
        },
        images=tuple(
            ImageRef(name=name, sha256=sha, mime=mime, width=width, height=height)
            for _, name, sha, mime, width, height in images
        ),
    )


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def voted_battles(
    *, chunk_size: int = CHUNK_SIZE, details: bool = True, **filters: Any
) -> Iterator[VotedBattle]:
    """Every vote that ``selectors.votes_for_export(**filters)`` selects, oldest first.

    Three queries per ``chunk_size`` votes: the votes' values (from one server-side cursor on
    PostgreSQL), the current messages of their battles and the visitors' reactions; a fourth
    for their prompts' images when a prompt of the chunk has any. ``details=False`` leaves out what
    only the ``arena`` format writes (the judge and the style counts), which costs a JSON
    decoding and a hash a vote.
    """
    columns: tuple[str | Value, ...] = _VOTE_COLUMNS
    if not details:
        blank = {"voter_id": Value(""), "style": Value("")}  # "": no judge, no style counts
        columns = tuple(blank.get(c, c) for c in _VOTE_COLUMNS)
    votes = votes_for_export(**filters).prefetch_related(None).values_list(*columns)
    for chunk in chunks(votes.iterator(chunk_size=chunk_size), chunk_size):
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
        reacted: dict[uuid.UUID, list[ReactionValues]] = {}
        reactions = (
            Reaction.objects.filter(battle_id__in=[vote[0] for vote in chunk])
            .order_by()
            .values_list(*_REACTION_COLUMNS)
        )
        for reaction in reactions:
            reacted.setdefault(reaction[0], []).append(cast(ReactionValues, reaction))
        pictured: dict[int, list[ImageValues]] = {}
        with_images = [vote[11] for vote in chunk if vote[12]]
        if with_images:
            stored = (
                PromptImage.objects.filter(prompt_id__in=with_images)
                .order_by("prompt_id", "position")
                .values_list(*_IMAGE_COLUMNS)
            )
            for image in stored:
                pictured.setdefault(image[0], []).append(cast(ImageValues, image))
        for vote in chunk:
            yield voted_battle(
                cast(VoteValues, vote),
                by_battle.get(vote[0], ()),
                reacted.get(vote[0], ()),
                pictured.get(vote[11], ()) if vote[12] else (),
            )


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
