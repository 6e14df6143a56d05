"""Style counts equal LMArena's own on 750 real Arena-Hard v2.0 answers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from answer_style import (
    CONV_METADATA_KEYS,
    ENCODING_NAME,
    STYLE_COLUMNS,
    conv_metadata,
    count_tokens,
    strip_code_blocks,
    style_counts,
)
from ratings import engine

ANSWERS = Path(__file__).parent / "data" / "arena_hard_style" / "o3-mini-2025-01-31.jsonl"


def load_answers() -> list[tuple[str, dict]]:
    with ANSWERS.open(encoding="utf-8") as handle:  # not splitlines(): texts hold U+2028
        rows = [json.loads(line) for line in handle if line.strip()]
    return [(row["messages"][-1]["content"]["answer"], row["metadata"]) for row in rows]


ALL = load_answers()


def test_all_750_answers_are_checked():
    assert len(ALL) == 750


def test_header_list_and_bold_counts_equal_lmarena_on_every_answer():
    mismatched = [
        i
        for i, (text, meta) in enumerate(ALL)
        if {k: v for k, v in style_counts(text).items() if k != "tokens"}
        != {k: meta[k] for k in ("header_count", "list_count", "bold_count")}
    ]
    assert mismatched == []


def test_token_counts_are_within_one_percent_of_lmarena_token_len_on_every_answer():
    off = [
        i
        for i, (text, meta) in enumerate(ALL)
        if abs(count_tokens(text) - meta["token_len"]) > 0.01 * meta["token_len"]
    ]
    assert off == []


# Texts beyond the answers: special-token text, a lone surrogate (replaced before counting), no
# text, whitespace runs, emoji, a long repetition, several scripts.
EDGE_TEXTS = [
    "",
    "<|endoftext|> and <|endofprompt|>",
    "half a pair: \ud800 here",
    " \n\n\t  \r\n",
    "\U0001f600" * 50,
    "ab" * 20_000,
    "Ça, 東京, Москва, عربى, हिन्दी 123456789",
]


def test_token_counts_equal_bpe_openais_encoding_on_every_answer_and_edge_case():
    # The counter calls the package's extension directly; its Python Encoding (what the counts
    # were made with before) must give the same number on everything.
    import bpe_openai

    encoding = bpe_openai.get_encoding(ENCODING_NAME)
    texts = [text for text, _ in ALL] + EDGE_TEXTS
    differ = [
        i
        for i, text in enumerate(texts)
        if count_tokens(text) != len(encoding.encode(text, disallowed_special=()))
    ]
    assert differ == []


def test_the_data_exercises_every_kind_of_element():
    totals = {"h1": 0, "h2": 0, "ordered": 0, "unordered": 0, "**": 0, "__": 0}
    for _, meta in ALL:
        for group in ("header_count", "list_count", "bold_count"):
            for key, value in meta[group].items():
                if key in totals:
                    totals[key] += value
    assert all(value > 0 for value in totals.values())


def test_markdown_inside_a_fenced_code_block_is_not_counted():
    text = "# Title\n```python\n# comment\n- not a list\n**x**\n```\n- item\n"
    counts = style_counts(text)
    assert counts["header_count"]["h1"] == 1
    assert counts["list_count"]["unordered"] == 1
    assert counts["bold_count"]["**"] == 0


def test_code_body_is_removed_everywhere_it_occurs_as_lmarena_does():
    # The body "**b**" also occurs outside the block; LMArena's removal drops both.
    assert strip_code_blocks("**b** and ```**b**```") == " and ``````"


def test_headers_need_a_space_and_are_counted_by_level():
    counts = style_counts("# a\n## b\n###c\n###### d\n####### e\n")
    assert counts["header_count"] == {"h1": 1, "h2": 1, "h3": 0, "h4": 0, "h5": 0, "h6": 1}


def test_lists_count_ordered_and_unordered_items_including_nested_ones():
    counts = style_counts("1. one\n2. two\n  - nested\n* star\n+ plus\n-not\n")
    assert counts["list_count"] == {"ordered": 2, "unordered": 3}


def test_bold_spans_count_stars_and_underscores_on_one_line():
    counts = style_counts("**a** __b__ **c\nd** __e__")
    assert counts["bold_count"] == {"**": 1, "__": 2}


def test_special_token_text_is_counted_as_ordinary_text():
    assert count_tokens("<|endoftext|>") > 1


def test_conv_metadata_sums_each_side_over_its_turns():
    one, two = style_counts("# a\n**b**"), style_counts("- x\n- y")
    meta = conv_metadata([one, two], [style_counts("plain")])
    assert meta["sum_assistant_a_tokens"] == one["tokens"] + two["tokens"]
    assert meta["header_count_a"]["h1"] == 1
    assert meta["list_count_a"] == {"ordered": 0, "unordered": 2}
    assert meta["bold_count_a"] == {"**": 1, "__": 0}
    assert meta["sum_assistant_b_tokens"] == count_tokens("plain")
    assert meta["header_count_b"] == dict.fromkeys(["h1", "h2", "h3", "h4", "h5", "h6"], 0)
    assert set(meta) == {column for pair in STYLE_COLUMNS.values() for column in pair}
    assert set(meta) == set(CONV_METADATA_KEYS)


def test_the_engine_reads_the_conv_metadata_the_counts_make():
    meta = conv_metadata([style_counts("# a\n- b\n**c**")], [style_counts("plain text")])
    battles = pd.DataFrame({"model_a": ["x"], "model_b": ["y"], "winner": ["tie"]})
    battles["conv_metadata"] = [meta]
    flat = engine.flatten_conv_metadata(battles).iloc[0]
    assert flat["sum_assistant_a_tokens"] == meta["sum_assistant_a_tokens"]
    assert (flat["header_count_a"], flat["list_count_a"], flat["bold_count_a"]) == (1, 1, 1)
    assert (flat["header_count_b"], flat["list_count_b"], flat["bold_count_b"]) == (0, 0, 0)


@pytest.mark.parametrize("text", ["", "no markdown at all"])
def test_plain_text_has_no_markdown_elements(text):
    counts = style_counts(text)
    assert sum(counts["header_count"].values()) == 0
    assert sum(counts["list_count"].values()) == 0
    assert sum(counts["bold_count"].values()) == 0
