"""The dataset card of an export folder: the YAML header the Hugging Face hub and
``datasets.load_dataset`` read, and a body saying what the rows are and what was left out."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml

from arena.exports.formats import FORMAT_CARDS, arrow_image, arrow_schema
from arena.exports.records import ExportStats

if TYPE_CHECKING:
    import pyarrow as pa


def _hf_feature(name: str, kind: pa.DataType) -> dict[str, Any]:
    """One column as the hub's ``dataset_info.features`` YAML spells it."""
    import pyarrow as pa

    if kind == arrow_image():
        return {"name": name, "dtype": "image"}
    if pa.types.is_struct(kind):
        return {"name": name, "struct": [_hf_feature(f.name, f.type) for f in kind.fields]}
    if pa.types.is_list(kind):
        inner = kind.value_type
        if pa.types.is_struct(inner) and inner != arrow_image():
            return {"name": name, "list": [_hf_feature(f.name, f.type) for f in inner.fields]}
        return {"name": name, "list": _hf_feature("", inner)["dtype"]}
    dtypes = {pa.string(): "string", pa.bool_(): "bool", pa.int64(): "int64", pa.binary(): "binary"}
    return {"name": name, "dtype": dtypes.get(kind, "float64")}


def _size_category(rows: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if rows < limit:
            return name
    return "100K<n<1M" if rows < 1_000_000 else "1M<n<10M"


def _moment(tstamp: float | None) -> str:
    return "–" if tstamp is None else datetime.fromtimestamp(tstamp, UTC).isoformat()


def dataset_card(
    fmt: str,
    data_file: str,
    stats: ExportStats,
    filters: Mapping[str, Any],
    *,
    license: str,
    jsonl: bool = False,
) -> str:
    """The ``README.md`` of an export folder: the YAML header the Hugging Face hub and
    ``datasets.load_dataset`` read (licence, task, tags, the file as the ``train`` split, its
    features; ``jsonl``: the features of the JSONL file, whose images are data URLs) and a body
    saying what the rows are, how many, and what was left out."""
    rows, trainers, tags = FORMAT_CARDS[fmt]
    header = {
        "license": license,
        "task_categories": ["text-generation", "reinforcement-learning"],
        "tags": ["human-feedback", "preference", *tags],
        "size_categories": [_size_category(stats.written)],
        "pretty_name": f"Arena votes ({fmt})",
        "configs": [
            {"config_name": "default", "data_files": [{"split": "train", "path": data_file}]}
        ],
        "dataset_info": {
            "features": [_hf_feature(f.name, f.type) for f in arrow_schema(fmt, jsonl=jsonl)]
        },
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
    front = yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=1000)
    return "---\n" + front + "---\n\n" + "\n".join(body) + "\n"
