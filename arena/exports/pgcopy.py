"""The fast path of the exports on PostgreSQL: one ``COPY (SELECT ...) TO STDOUT`` statement
streams every selected vote with what its rows are made of, in COPY's binary format, and each
row is joined from bytes.

Why one module: the statement's columns, the parsing of its binary rows and the byte shapers
that join them into each format's JSON lines are one contract; split, a column added on one
side and not the other would go unnoticed until an export came out wrong.

The statement selects the votes with ``selectors.votes_for_export``'s own SQL (so every filter
means the same), oldest first, and gathers each battle's current messages in a lateral
subquery as three arrays (turn and side, the user's texts, the answers). The reactions and the
prompt's images, which only ``arena``, ``kto-reactions`` and ``trl-vision`` write, come as
small JSON values, null for a battle without any. Nothing is read by a second query, and no
model instance is made.

Binary COPY holds the texts as they are (nothing to unescape), so a row is cut into its fields
by offsets; each text is escaped once by orjson, and a row's JSON line is its pieces joined,
byte for byte what ``writers.jsonl_line`` writes for the ORM path's row. A battle with images
(or without messages) goes through the formats' own shapers instead, from the same data. The
card's figures (rows, votes, skips by reason, the first and last vote) are counted as the rows
stream, as ``formats.export_rows`` counts them. PostgreSQL reads and sends while Python joins
and writes, on a core each.

SQLite (the demo) has no COPY: ``supported()`` is false there and an export reads its votes
through the ORM (``records.voted_battles``); the rows are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from functools import cache
from struct import Struct
from typing import Any, cast

import orjson
from django.db import connection
from django.db.models import F

from arena.exports.formats import (
    EMPTY,
    MULTI_TURN,
    NO_IMAGE,
    NO_REACTION,
    NO_SIDE,
    SHAPERS,
    TEXT_ONLY,
    TIE,
    ExportRow,
)
from arena.exports.formats import IMAGE_FORMATS as IMAGES
from arena.exports.records import (
    ExportStats,
    ImageRef,
    ReactionValue,
    VotedBattle,
    first_turn,
    judge_hash,
    voted_battles,
)
from arena.payloads import Side, Winner
from arena.selectors import votes_for_export

_INT16 = Struct(">h")
_INT32 = Struct(">i")
_INT64 = Struct(">q")
_ARRAY_HEAD = Struct(">iiiii")  # dimensions, has nulls, element type, length, lower bound
# Binary COPY's header: the signature, the flags and the header extension's length.
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = len(_SIGNATURE) + 8
# PostgreSQL's epoch (2000-01-01 UTC) in microseconds after the Unix one.
_EPOCH_2000_US = 946_684_800_000_000


def supported() -> bool:
    """Whether the default database can stream an export with COPY (PostgreSQL)."""
    return connection.vendor == "postgresql"


def _votes_sql(filters: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """The selector's query of the votes, as SQL and its parameters, with its columns named."""
    votes = (
        votes_for_export(**filters)
        .prefetch_related(None)
        .values(
            x_vote=F("id"),
            x_battle=F("battle_id"),
            x_winner=F("winner"),
            x_voter=F("voter_id"),
            x_created=F("created_at"),
            x_style=F("style"),
            x_mode=F("battle__mode"),
            x_slug_a=F("battle__model_a__slug"),
            x_slug_b=F("battle__model_b__slug"),
            x_language=F("battle__prompt__language"),
            x_category=F("battle__prompt__category"),
            x_source=F("battle__source"),
            x_prompt=F("battle__prompt_id"),
            x_image_count=F("battle__prompt__image_count"),
        )
    )
    sql, params = votes.query.sql_with_params()
    return sql, list(params)


#: The formats that write the judge and the style counts, the reactions, the images.
DETAILS = ("arena",)
REACTIONS = ("arena", "kto-reactions")


def export_sql(fmt: str, filters: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """The COPY statement of ``fmt`` over the votes ``filters`` select, and its parameters.

    Its columns, in order: the battle id; the verdict, the battle's mode (``t`` when
    anonymous), the two models' slugs, the prompt's language and category and the battle's
    source, as JSON strings joined by tabs (JSON holds no raw tab); the voter id and the style
    counts (``arena`` only, else null); the vote's time; the current messages as three arrays
    in one order: ``turn * 2 + (side = 'b')``, the user's texts, the answers; the reactions
    (``{side: [liked, tags, after_reveal]}``) and the images (``[[file, sha256, mime, width, height], ...]`` by position; for a text-only
    format only ``[]`` when there are some) as JSON, or null."""
    votes, params = _votes_sql(filters)
    details = fmt in DETAILS
    if fmt in REACTIONS:
        reactions = (
            "(SELECT jsonb_object_agg(r.side, jsonb_build_array(r.liked, r.tags, "
            "r.after_reveal))::text FROM arena_reaction r WHERE r.battle_id = v.x_battle)"
        )
    else:
        reactions = "NULL"
    if fmt in IMAGES:
        images = (
            "(SELECT jsonb_agg(jsonb_build_array(i.file, i.sha256, i.mime, i.width, i.height) "
            "ORDER BY i.position)::text FROM arena_promptimage i WHERE i.prompt_id = v.x_prompt)"
        )
    else:
        images = "(SELECT '[]' FROM arena_promptimage i WHERE i.prompt_id = v.x_prompt LIMIT 1)"
    # Only constants and the selector's own SQL (its values are parameters) are put together.
    sql = f"""
COPY (
SELECT v.x_battle,
       concat_ws(E'\\t', to_json(v.x_winner), CASE WHEN v.x_mode = 'anonymous' THEN 't' ELSE 'f' END,
                 to_json(v.x_slug_a), to_json(v.x_slug_b), to_json(coalesce(v.x_language, '')),
                 to_json(coalesce(v.x_category, '')), to_json(v.x_source)),
       {"v.x_voter" if details else "NULL"}, {"v.x_style::text" if details else "NULL"},
       v.x_created, m.keys, m.users, m.answers, {reactions},
       CASE WHEN v.x_image_count > 0 THEN {images} END
FROM ({votes}) v
CROSS JOIN LATERAL (
  -- Three aggregates over the same rows: their arrays are in one order (whichever the scan
  -- gives; Python orders the turns), and the texts as stored (Python escapes them).
  SELECT array_agg(b.turn * 2 + CASE WHEN b.side = 'b' THEN 1 ELSE 0 END) AS keys,
         array_agg(b.user_content) AS users, array_agg(b.content) AS answers
  FROM arena_battlemessage b
  WHERE b.battle_id = v.x_battle AND b.superseded_at IS NULL
) m
ORDER BY v.x_created, v.x_vote
) TO STDOUT (FORMAT binary)
"""  # noqa: S608
    return sql, params


def _fields(row: bytes) -> list[bytes | None]:
    """A binary COPY row cut into its fields (None for a null)."""
    (count,) = _INT16.unpack_from(row, 0)
    offset = 2
    fields: list[bytes | None] = []
    unpack = _INT32.unpack_from
    for _ in range(count):
        (size,) = unpack(row, offset)
        offset += 4
        if size < 0:
            fields.append(None)
            continue
        fields.append(row[offset : offset + size])
        offset += size
    return fields


class _Judges(dict[bytes, bytes]):
    """Judge ids by voter id, each hashed once."""

    def __missing__(self, voter: bytes) -> bytes:
        judge = self[voter] = judge_hash(voter.decode()).encode() if voter else b""
        return judge


# The JSON pieces of the rows: each text arrives as a JSON string (``to_json``, which escapes
# as orjson does), so a row is its pieces joined, byte for byte what ``jsonl_line`` writes.
_USER = b'{"role":"user","content":'
_ASSISTANT = b'{"role":"assistant","content":'
_EMPTY = b'""'
_BOOL = {True: b"true", False: b"false"}
_A_WON, _B_WON = b'"model_a"', b'"model_b"'
_TIE, _BOTH_BAD = b'"tie"', b'"tie (bothbad)"'


def _blank(text: bytes) -> bool:
    """Whether a JSON string's text is empty once stripped (``str.strip``, as ``_sides``)."""
    first = text[1:2]
    if first.isalnum():  # ASCII letters and digits: the common case, decided at once
        return False
    return not cast(str, orjson.loads(text)).strip()


def _conversation(users: list[bytes], answers: list[bytes]) -> bytes:
    return b",".join(
        _USER + user + b"}," + _ASSISTANT + answer + b"}"
        for user, answer in zip(users, answers, strict=True)
    )


def _after_prompt(users: list[bytes], answers: list[bytes]) -> bytes:
    """A side's messages after the prompt (``formats._trl_text``): its first answer, then each
    follow-up question and its answer."""
    if len(answers) == 1:
        return _ASSISTANT + answers[0] + b"}"
    return _ASSISTANT + answers[0] + b"}," + _conversation(users[1:], answers[1:])


def _transcript(users: list[bytes], answers: list[bytes]) -> bytes:
    return (
        b'"'
        + b"".join(
            b"\\n\\nHuman: " + user[1:-1] + b"\\n\\nAssistant: " + answer[1:-1]
            for user, answer in zip(users, answers, strict=True)
        )
        + b'"'
    )


class _Vote:
    """One vote of the COPY stream, its texts as JSON strings."""

    __slots__ = (
        "battle", "winner", "anonymous", "slug_a", "slug_b", "language", "category", "source",
        "voter", "style", "tstamp", "users", "a", "b", "turns_all", "reactions", "images",
    )  # fmt: skip

    battle: bytes
    winner: bytes
    anonymous: bool
    slug_a: bytes
    slug_b: bytes
    language: bytes
    category: bytes
    source: bytes
    voter: bytes | None
    style: bytes | None
    tstamp: float
    users: list[bytes]
    a: list[bytes]
    b: list[bytes]
    turns_all: int
    reactions: bytes | None
    images: bytes | None

    def sides(self) -> tuple[list[bytes], list[bytes]] | str:
        """(chosen answers, rejected answers), or why there is no preferred side."""
        if self.winner == _A_WON:
            chosen, rejected = self.a, self.b
        elif self.winner == _B_WON:
            chosen, rejected = self.b, self.a
        else:
            return NO_SIDE
        if any(_blank(text) for text in chosen):
            return EMPTY
        return chosen, rejected

    def prompt(self) -> bytes:
        return b'{"prompt":[' + _USER + self.users[0] + b"}]"

    def reaction_values(self) -> dict[Side, ReactionValue]:
        reactions: dict[Side, ReactionValue] = {}
        if self.reactions is not None:
            for side, (liked, tags, late) in orjson.loads(self.reactions).items():
                reactions[cast(Side, side)] = {
                    "liked": liked,
                    "tags": list(tags or []),
                    "after_reveal": late,
                }
        return reactions

    def record(self, fmt: str) -> VotedBattle:
        """The vote as ``records.voted_battle`` makes it (for the shapers' own path)."""
        images: tuple[ImageRef, ...] = ()
        if self.images is not None:
            images = tuple(
                ImageRef(name=name, sha256=sha, mime=mime, width=width, height=height)
                for name, sha, mime, width, height in orjson.loads(self.images)
            )
            if fmt not in IMAGES and not images:
                # A text-only format is told only that there are some: one stands for them,
                # which it never reads (it skips the battle).
                images = (ImageRef(name="", sha256="", mime="", width=0, height=0),)
        texts = orjson.loads
        style = orjson.loads(self.style) if self.style is not None else None
        return VotedBattle(
            battle_id=self.battle.hex(),
            model_a=texts(self.slug_a),
            model_b=texts(self.slug_b),
            winner=cast(Winner, texts(self.winner)),
            judge=self.voter.decode() if self.voter else "",  # already hashed
            anonymous=self.anonymous,
            language=texts(self.language),
            category=texts(self.category),
            tstamp=self.tstamp,
            user_turns=[texts(u) for u in self.users],
            answers={"a": [texts(x) for x in self.a], "b": [texts(x) for x in self.b]},
            style=style or {},
            source=texts(self.source),
            reactions=self.reaction_values(),
            images=images,
        )


def _arena(vote: _Vote, first_turn_only: bool) -> list[bytes] | str:
    style = b"null"
    if vote.style is not None and not (first_turn_only and vote.turns_all > 1):
        counts = orjson.loads(vote.style)
        if counts:
            style = orjson.dumps(counts)
    reactions = b"null"
    if vote.reactions is not None:
        values = vote.reaction_values()
        reactions = orjson.dumps({"a": values.get("a"), "b": values.get("b")})
    return [
        b"".join(
            (
                b'{"question_id":"',
                vote.battle.hex().encode(),
                b'","model_a":',
                vote.slug_a,
                b',"model_b":',
                vote.slug_b,
                b',"winner":',
                vote.winner,
                b',"judge":"',
                vote.voter or b"",
                b'","conversation_a":[',
                _conversation(vote.users, vote.a),
                b'],"conversation_b":[',
                _conversation(vote.users, vote.b),
                b'],"turn":',
                str(len(vote.users)).encode(),
                b',"anony":',
                _BOOL[vote.anonymous],
                b',"language":',
                vote.language,
                b',"category":',
                vote.category,
                b',"tstamp":',
                orjson.dumps(vote.tstamp),
                b',"conv_metadata":',
                style,
                b',"source":',
                vote.source,
                b',"reactions":',
                reactions,
                b',"images":[]}\n',
            )
        )
    ]


def _text_sides(vote: _Vote) -> tuple[list[bytes], list[bytes]] | str:
    """The chosen and rejected answers of a text-only format's row, or why it is left out (an
    image battle, a vote with no preferred or an empty side)."""
    return TEXT_ONLY if vote.images is not None else vote.sides()


def _trl(vote: _Vote, first_turn_only: bool) -> list[bytes] | str:
    sides = _text_sides(vote)
    if isinstance(sides, str):
        return sides
    chosen, rejected = sides
    users = vote.users
    return [
        vote.prompt()
        + b',"chosen":['
        + _after_prompt(users, chosen)
        + b'],"rejected":['
        + _after_prompt(users, rejected)
        + b"]}\n"
    ]


def _trl_vision(vote: _Vote, first_turn_only: bool) -> list[bytes] | str:
    return NO_IMAGE  # a battle with images takes the shapers' own path


def _openai(vote: _Vote, first_turn_only: bool) -> list[bytes] | str:
    sides = _text_sides(vote)
    if isinstance(sides, str):
        return sides
    if len(vote.users) != 1:
        return MULTI_TURN
    chosen, rejected = sides
    return [
        b'{"input":{"messages":[' + _USER + vote.users[0] + b'}]},"preferred_output":['
        + _ASSISTANT + chosen[0] + b'}],"non_preferred_output":['
        + _ASSISTANT + rejected[0] + b"}]}\n"
    ]  # fmt: skip


def _hh_rlhf(vote: _Vote, first_turn_only: bool) -> list[bytes] | str:
    sides = _text_sides(vote)
    if isinstance(sides, str):
        return sides
    chosen, rejected = sides
    return [
        b'{"chosen":' + _transcript(vote.users, chosen) + b',"rejected":'
        + _transcript(vote.users, rejected) + b"}\n"
    ]  # fmt: skip


def _kto(vote: _Vote, first_turn_only: bool) -> list[bytes] | str:
    if vote.images is not None:
        return TEXT_ONLY
    if vote.winner == _BOTH_BAD:
        labelled = [(vote.a, b"false"), (vote.b, b"false")]
    else:
        sides = vote.sides()
        if isinstance(sides, str):
            return TIE if vote.winner == _TIE else sides
        labelled = [(sides[0], b"true"), (sides[1], b"false")]
    prompt = vote.prompt()
    return [
        prompt + b',"completion":[' + _after_prompt(vote.users, answers) + b'],"label":'
        + label + b"}\n"
        for answers, label in labelled
    ]  # fmt: skip


def _kto_reactions(vote: _Vote, first_turn_only: bool) -> list[bytes] | str:
    if vote.images is not None:
        return TEXT_ONLY
    if vote.reactions is None:
        return NO_REACTION
    reactions = vote.reaction_values()
    prompt = vote.prompt()
    models = {"a": vote.slug_a, "b": vote.slug_b}
    answers = {"a": vote.a, "b": vote.b}
    return [
        prompt + b',"completion":[' + _after_prompt(vote.users, answers[side]) + b'],"label":'
        + _BOOL[reaction["liked"]] + b',"model":' + models[side] + b',"tags":'
        + orjson.dumps(reaction["tags"]) + b',"after_reveal":' + _BOOL[reaction["after_reveal"]]
        + b"}\n"
        for side, reaction in sorted(reactions.items())
    ]  # fmt: skip


_SHAPERS: dict[str, Callable[[_Vote, bool], list[bytes] | str]] = {
    "arena": _arena,
    "trl": _trl,
    "trl-vision": _trl_vision,
    "openai": _openai,
    "hh-rlhf": _hh_rlhf,
    "kto": _kto,
    "kto-reactions": _kto_reactions,
}
assert set(_SHAPERS) == set(SHAPERS)


# The message keys of a battle whose every turn has both answers: 0, 1 (turn 0's a and b), 2...
_USUAL_KEYS = list(range(512))


def _json_strings(array: bytes | None) -> list[bytes]:
    """A one-dimensional ``text[]`` without nulls in binary form, each text as a JSON string
    (orjson's escaping, as ``jsonl_line`` writes it)."""
    if array is None:
        return []
    dimensions, _, _, length, _ = _ARRAY_HEAD.unpack_from(array, 0)
    if not dimensions:
        return []
    offset = 20
    unpack = _INT32.unpack_from
    dumps = orjson.dumps
    texts = []
    for _ in range(length):
        (size,) = unpack(array, offset)
        offset += 4
        texts.append(dumps(array[offset : offset + size].decode()))
        offset += size
    return texts


def _ints(array: bytes | None) -> list[int]:
    """A one-dimensional ``integer[]`` in binary form."""
    if array is None:
        return []
    dimensions, _, _, length, _ = _ARRAY_HEAD.unpack_from(array, 0)
    if not dimensions:
        return []
    return list(_int_elements(length).unpack_from(array, 20))


@cache
def _int_elements(length: int) -> Struct:
    """``length`` array elements: each its size (4 bytes) and its value (4, big-endian)."""
    return Struct(">" + "xxxxi" * length)


def _copied_votes(fmt: str, filters: Mapping[str, Any]) -> Iterator[_Vote]:
    """The votes of one COPY statement, oldest first."""
    sql, params = export_sql(fmt, filters)
    judges = _Judges()
    with connection.cursor() as cursor:
        raw = cursor.cursor
        # JIT would compile the statement's expressions for seconds, longer than it saves.
        raw.execute("SET jit = off")
        with raw.copy(sql, params) as copy:
            first = True
            for data in copy:
                row = bytes(data)
                if first:
                    first = False
                    if not row.startswith(_SIGNATURE):
                        raise ValueError("not binary COPY data")
                    (extension,) = _INT32.unpack_from(row, _HEADER - 4)
                    row = row[_HEADER + extension :]
                if row[:2] == b"\xff\xff":  # the trailer: the end of the data follows
                    continue
                (
                    battle,
                    meta,
                    voter,
                    style,
                    created,
                    key_array,
                    user_array,
                    answer_array,
                    reactions,
                    images,
                ) = _fields(row)
                vote = _Vote()
                vote.battle = cast(bytes, battle)
                (
                    vote.winner,
                    anonymous,
                    vote.slug_a,
                    vote.slug_b,
                    vote.language,
                    vote.category,
                    vote.source,
                ) = cast(bytes, meta).split(b"\t")
                vote.anonymous = anonymous == b"t"
                vote.voter = judges[voter] if voter is not None else None
                vote.style = style
                (micros,) = _INT64.unpack(cast(bytes, created))
                vote.tstamp = (micros + _EPOCH_2000_US) / 1_000_000
                keys = _ints(key_array)
                texts = _json_strings(user_array) + _json_strings(answer_array)
                count = len(keys)
                if keys == _USUAL_KEYS[:count] and not count % 2:
                    # Both sides of every turn, turns 0, 1, 2... in order: the usual battle.
                    vote.users = texts[1:count:2]
                    vote.a, vote.b = texts[count::2], texts[count + 1 :: 2]
                else:
                    turns: dict[int, bytes] = {}
                    answers: dict[int, dict[int, bytes]] = {0: {}, 1: {}}
                    for i, key in enumerate(keys):
                        turns[key >> 1] = texts[i]
                        answers[key & 1][key >> 1] = texts[count + i]
                    order = sorted(turns)
                    vote.users = [turns[t] for t in order]
                    vote.a = [answers[0].get(t, _EMPTY) for t in order]
                    vote.b = [answers[1].get(t, _EMPTY) for t in order]
                vote.turns_all = len(vote.users)
                vote.reactions = reactions
                vote.images = images
                yield vote


def copied_battles(fmt: str, **filters: Any) -> Iterator[VotedBattle]:
    """Every vote that ``selectors.votes_for_export(**filters)`` selects, oldest first, as
    ``records.voted_battles`` gives them (what ``fmt`` does not write left out, as with its
    ``details=False``), read with one COPY statement."""
    for vote in _copied_votes(fmt, filters):
        yield vote.record(fmt)


def copied_rows(
    fmt: str, stats: ExportStats, *, first_turn_only: bool = False, **filters: Any
) -> Iterator[bytes | ExportRow]:
    """The rows of ``fmt`` as ``formats.export_rows`` gives them, counted in ``stats`` the
    same way, read with one COPY statement: each row as its JSON line (bytes, with its
    newline), or, for a battle with images (or without messages), as the shapers make it."""
    shape = _SHAPERS[fmt]
    shape_record = SHAPERS[fmt]
    skipped = stats.skipped
    for vote in _copied_votes(fmt, filters):
        if first_turn_only and vote.turns_all > 1:
            vote.users, vote.a, vote.b = vote.users[:1], vote.a[:1], vote.b[:1]
        rows: list[bytes] | list[ExportRow]
        if (vote.images is not None and fmt in IMAGES) or not vote.users:
            record = vote.record(fmt)
            if first_turn_only:
                record = first_turn(record) if vote.turns_all <= 1 else replace(record, style={})
            shaped = shape_record(record)
            if isinstance(shaped, str):
                skipped[shaped] += 1
                continue
            rows = cast(list[ExportRow], shaped if isinstance(shaped, list) else [shaped])
        else:
            lines = shape(vote, first_turn_only)
            if isinstance(lines, str):
                skipped[lines] += 1
                continue
            rows = lines
        stats.votes += 1
        stats.written += len(rows)
        if stats.first is None:
            stats.first = vote.tstamp
        stats.last = vote.tstamp
        yield from rows


def export_battles(fmt: str, **filters: Any) -> Iterator[VotedBattle]:
    """The records an export of ``fmt`` writes: streamed with COPY on PostgreSQL, read through
    the ORM elsewhere (SQLite), the same records either way."""
    if supported():
        return copied_battles(fmt, **filters)
    return voted_battles(details=fmt in DETAILS, **filters)
