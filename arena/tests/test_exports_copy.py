"""The COPY path of the exports (PostgreSQL) gives the ORM path's rows, record for record.

Every format, whole conversations and first turns only, under the filters the command and the
endpoint accept, over votes that exercise what the shapers decide: several turns, a
regenerated answer, a side without an answer, empty and blank answers, ties and both-bad
votes, flagged and named votes, reactions, an image battle and texts that COPY escapes."""

import io
import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pyarrow.parquet as pq
import pytest
import yaml
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from arena.exports import (
    FORMATS,
    ExportStats,
    copied_battles,
    copied_rows,
    export_rows,
    jsonl_line,
    voted_battles,
)
from arena.exports.pgcopy import DETAILS
from arena.live.images import image_upload
from arena.models import BattleMessage, PromptImage, Reaction, Vote
from arena.tests.factories import ArenaModelFactory
from arena.tests.images import jpeg_with_exif, png_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.usefixtures("media_root")]

START = datetime(2026, 3, 1, tzinfo=UTC)
# Texts COPY's text format would escape, and JSON too: tabs, newlines, backslashes, quotes,
# a control character, a literal \N, non-ASCII.
AWKWARD = 'tab\there\nnew "quoted" back\\slash \\N \x01 caf\u00e9 \U0001f989 \r\n'


@pytest.fixture
def votes(make_vote):
    owl = ArenaModelFactory(slug="owl-7b", supports_images=True)
    lark = ArenaModelFactory(slug="lark-70b", supports_images=True)
    wren = ArenaModelFactory(slug="wren-1b")
    made = [
        make_vote(owl, lark, "model_a"),
        make_vote(lark, owl, "model_b", turns=2, answers=("first", "second")),
        make_vote(owl, wren, "tie"),
        make_vote(wren, lark, "tie (bothbad)", turns=3),
        make_vote(owl, lark, "model_a", answers=("", "rejected")),  # an empty chosen answer
        make_vote(owl, lark, "model_b", answers=("x", "\u3000\n\t")),  # a blank one
        make_vote(owl, lark, "model_a", answers=("", "")),  # both empty, A chosen
        make_vote(lark, wren, "model_a", answers=(AWKWARD, "plain"), prompt=AWKWARD),
        make_vote(owl, lark, "model_b", category="coding", language="de"),
        make_vote(owl, wren, "model_a", mode="named"),
        # Flagged for an identity leak: an answer names its own model.
        make_vote(owl, lark, "model_b", flagged=True, answers=("I am owl-7b", "hello")),
        make_vote(wren, owl, "model_a", turns=2),  # A's second answer is regenerated below
        make_vote(owl, lark, "tie (bothbad)", turns=2),  # B lacks its second answer below
        make_vote(lark, owl, "model_a", images=2, prompt="What is in these pictures?"),
        make_vote(lark, owl, "model_b", images=1),  # image_count set, but no image stored
    ]
    made[10].flags = ["names_model"]
    made[10].save(update_fields=["flags"])
    old = BattleMessage.objects.get(battle=made[11].battle, side="a", turn=1)
    old.superseded_at = timezone.now()
    old.save(update_fields=["superseded_at"])
    BattleMessage.objects.create(
        battle=made[11].battle, side="a", turn=1, user_content=old.user_content, content="again"
    )
    BattleMessage.objects.filter(battle=made[12].battle, side="b", turn=1).delete()
    Vote.objects.filter(pk=made[3].pk).update(style={})
    Reaction.objects.create(battle=made[0].battle, side="a", liked=True, tags=["clear"])
    Reaction.objects.create(battle=made[0].battle, side="b", liked=False, after_reveal=True)
    Reaction.objects.create(battle=made[1].battle, side="b", liked=False, tags=["wrong", "long"])
    Reaction.objects.create(battle=made[13].battle, side="a", liked=True)
    for position, data in enumerate([png_bytes(40, 30), jpeg_with_exif(64, 48)]):
        image = image_upload(session_key="s" * 32, upload=io.BytesIO(data))
        PromptImage.objects.filter(pk=image.pk).update(
            battle=made[13].battle, prompt=made[13].battle.prompt, position=position
        )
    for n, vote in enumerate(made):
        # Two votes at the same moment: the vote's id orders them, on both paths.
        moment = START + timedelta(hours=n if n != 5 else 4, microseconds=123_457 * n)
        Vote.objects.filter(pk=vote.pk).update(created_at=moment)
    return made


FILTERS = [
    {},
    {"include_flagged": True, "include_named": True},
    {"since": START + timedelta(hours=3), "until": START + timedelta(hours=9)},
    {"models": ["wren-1b"]},
    {"category": "coding"},
    {"language": "de"},
]


def both(fmt, filters, first_turn_only):
    old_stats, new_stats = ExportStats(), ExportStats()
    old = export_rows(
        voted_battles(details=fmt in DETAILS, **filters),
        fmt,
        old_stats,
        first_turn_only=first_turn_only,
    )
    new = copied_rows(fmt, new_stats, first_turn_only=first_turn_only, **filters)
    lines = [r.decode() if isinstance(r, bytes) else jsonl_line(r) for r in new]
    return [jsonl_line(r) for r in old], old_stats, lines, new_stats


def test_the_copy_paths_records_are_the_orm_paths(votes):
    # arena reads everything a record holds (the other formats leave out what they never write).
    old = list(voted_battles(include_flagged=True, include_named=True))
    assert list(copied_battles("arena", include_flagged=True, include_named=True)) == old


@pytest.mark.parametrize("first_turn_only", [False, True])
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_copy_path_writes_the_orm_paths_rows_and_counts_in_every_format(
    votes, fmt, first_turn_only
):
    for filters in FILTERS:
        old, old_stats, new, new_stats = both(fmt, filters, first_turn_only)
        assert new == old, (fmt, filters)
        assert new_stats == old_stats, (fmt, filters)


def test_the_edge_cases_are_in_the_compared_exports(votes):
    """The comparison above is not of empty exports: each case reaches the rows or the skips."""
    _, stats, rows, _ = both("trl", {"include_flagged": True, "include_named": True}, False)
    assert stats.skipped == {
        "ties and both-bad votes (no preferred side)": 3,
        "votes for an empty answer": 3,
        "image battles (the format holds text only; use arena or trl-vision)": 1,
    }
    arena = [json.loads(line) for line in both("arena", {"include_flagged": True}, False)[2]]
    regenerated = next(r for r in arena if r["question_id"] == votes[11].battle_id.hex)
    assert regenerated["conversation_a"][3]["content"] == "again"
    missing = next(r for r in arena if r["question_id"] == votes[12].battle_id.hex)
    assert missing["conversation_b"][3] == {"role": "assistant", "content": ""}
    awkward = next(r for r in arena if r["question_id"] == votes[7].battle_id.hex)
    assert awkward["conversation_a"][:2] == [
        {"role": "user", "content": AWKWARD},
        {"role": "assistant", "content": AWKWARD},
    ]
    pictured = next(r for r in arena if r["question_id"] == votes[13].battle_id.hex)
    assert len(pictured["images"]) == 2 and pictured["reactions"]["a"]["liked"] is True
    assert any(r["question_id"] == votes[10].battle_id.hex for r in arena)  # the flagged one
    vision = [json.loads(line) for line in both("trl-vision", {}, False)[2]]
    assert [len(r["images"]) for r in vision] == [2]


def test_the_copy_path_reads_the_votes_with_one_statement(votes):
    with CaptureQueriesContext(connection) as queries:
        records = list(copied_battles("arena", include_flagged=True, include_named=True))
    assert len(records) == len(votes)
    # The COPY goes past Django's query log; what the log holds is any other read, and none
    # reads the messages, reactions or images apart (the ORM path reads each of them).
    assert not [q for q in queries if "arena_" in q["sql"]]


def folder_export(tmp_path, name, fmt, *args):
    out = tmp_path / name
    call_command("export_votes", f"--format={fmt}", f"-o={out}/", *args, stderr=StringIO())
    return out


def card_figures(folder):
    text = (folder / "README.md").read_text()
    return [line for line in text.splitlines() if not line.startswith("- written ")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_commands_files_and_cards_are_the_same_on_both_paths(votes, tmp_path, monkeypatch, fmt):
    args = ("--include-flagged", "--include-named")
    fast_jsonl = folder_export(tmp_path, "fast", fmt, *args)
    fast_parquet = folder_export(tmp_path, "fast-parquet", fmt, "--parquet", *args)
    monkeypatch.setattr("arena.exports.pgcopy.supported", lambda: False)
    orm_jsonl = folder_export(tmp_path, "orm", fmt, *args)
    orm_parquet = folder_export(tmp_path, "orm-parquet", fmt, "--parquet", *args)
    data = f"arena-votes-{fmt}"
    assert (fast_jsonl / f"{data}.jsonl").read_bytes() == (orm_jsonl / f"{data}.jsonl").read_bytes()
    fast_table = pq.read_table(fast_parquet / f"{data}.parquet")
    orm_table = pq.read_table(orm_parquet / f"{data}.parquet")
    assert fast_table.schema == orm_table.schema
    assert fast_table.to_pylist() == orm_table.to_pylist()
    assert card_figures(fast_jsonl) == card_figures(orm_jsonl)
    assert card_figures(fast_parquet) == card_figures(orm_parquet)
    header = yaml.safe_load((fast_parquet / "README.md").read_text().split("---")[1])
    assert header["pretty_name"] == f"Arena votes ({fmt})"


def test_a_parquet_file_holds_the_records_of_its_jsonl_twin(votes, tmp_path):
    """The Parquet writer parses the rows' JSON with Arrow: the records are the rows' own."""
    jsonl = folder_export(tmp_path, "j", "kto", "--include-flagged")
    parquet = folder_export(tmp_path, "p", "kto", "--parquet", "--include-flagged")
    lines = (jsonl / "arena-votes-kto.jsonl").read_text().splitlines()
    assert pq.read_table(parquet / "arena-votes-kto.parquet").to_pylist() == [
        json.loads(line) for line in lines
    ]
    assert len(lines) > 8
