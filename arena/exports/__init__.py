"""Votes as training data: the formats preference trainers load.

One record per voted battle, built from the battle's current messages (a regenerated answer's
replacement, never the superseded one) and its vote. Seven formats:

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
- ``kto-reactions``: ``kto`` rows labelled by the visitor's own thumbs up or down on one
  side's answers, with the model, the reason tags and whether the names were known.
- ``trl-vision``: TRL's vision preference layout, ``trl``'s columns and the prompt's
  ``images``; image battles only. ``arena`` rows carry the images too; the text-only formats
  skip image battles and count them (``formats``).

``first_turn_only`` (``--first-turn-only``, ``?first_turn_only=1``) writes every format from the
first turn alone: the prompt is the first user turn and each side's answer the first one, with
no follow-up anywhere (OpenAI's format then holds multi-turn battles too; an ``arena`` row has
``turn`` 1 and, for a battle that went on, no style counts, which were counted over every
turn). The verdict was given on the whole conversation and is kept as the first answers'.

The three pairwise formats need a preferred side, so ties and "both bad" are skipped (and
counted). ``judge`` is a keyed hash of the pseudonymous voter id: stable across exports, so
one judge's votes can be grouped, but not the id the site stores; no IP hash leaves the site.

Exports stream. On PostgreSQL one ``COPY ... TO STDOUT`` statement reads the votes with their
current messages and each row's JSON line is joined from bytes (``pgcopy``); elsewhere
(SQLite) votes are read as plain values a chunk at a time (one query for the votes of a chunk,
one for their messages) and shaped here; the rows are the same. JSONL is written a line at a
time and Parquet a row group at a time under a fixed Arrow schema per format, so memory stays
flat however many votes there are.
``write_dataset`` writes a folder ``datasets.load_dataset`` reads as it is: the data file and a
dataset card (``README.md``) whose YAML header names the file, the licence and the features.

The package: ``records`` reads votes through the ORM, ``pgcopy`` with COPY, ``formats``
shapes them (and holds each format's Arrow schema), ``filters`` turns parameters into the
selector's filters, ``writers`` writes JSONL, Parquet and dataset folders, ``card`` writes the
card.
"""

from arena.exports.card import dataset_card
from arena.exports.filters import (
    export_options,
    first_turn_option,
    parse_moment,
)
from arena.exports.formats import (
    FORMATS,
    IMAGE_FORMATS,
    SHAPERS,
    ExportRow,
    arrow_schema,
    export_rows,
    to_arena,
    to_hh_rlhf,
    to_kto,
    to_openai,
    to_trl,
    to_trl_vision,
)
from arena.exports.pgcopy import copied_battles, copied_rows, export_battles, supported
from arena.exports.records import (
    ExportStats,
    VotedBattle,
    first_turn,
    judge_hash,
    voted_battle,
    voted_battles,
)
from arena.exports.writers import (
    VOTES_LICENSE,
    jsonl_line,
    write_dataset,
    write_jsonl,
    write_jsonl_bytes,
    write_parquet,
)

__all__ = [
    "ExportRow",
    "ExportStats",
    "FORMATS",
    "IMAGE_FORMATS",
    "SHAPERS",
    "VOTES_LICENSE",
    "VotedBattle",
    "arrow_schema",
    "copied_battles",
    "copied_rows",
    "dataset_card",
    "export_battles",
    "export_options",
    "export_rows",
    "first_turn",
    "first_turn_option",
    "jsonl_line",
    "judge_hash",
    "parse_moment",
    "supported",
    "to_arena",
    "to_hh_rlhf",
    "to_kto",
    "to_openai",
    "to_trl",
    "to_trl_vision",
    "voted_battle",
    "voted_battles",
    "write_dataset",
    "write_jsonl",
    "write_jsonl_bytes",
    "write_parquet",
]
