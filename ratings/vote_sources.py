"""The rated votes, read from their sources: the one place the ratings side reads votes for a fit.

Why one module: the Parquet writer and its reader share the file's schema and columns, and
both must select exactly the votes and columns that ``rating_battles`` does; in one module a
change to the battle table's columns is one edit that the row-for-row tests check. The
categories the readers apply are ``ratings.categories``; the fits, ``ratings.fits``.

Arena's votes are read only through ``arena.selectors.votes_for_rating`` (``rated_votes``):
with repeated visitors' prompts capped at ``RATINGS_DUPLICATE_PROMPT_CAP`` and each source's
votes on a model bounded (``source_cap``). A refit reads them one of two ways, both here:

- in memory: ``rating_battles``, the battle table in vote-id order (``FrameVotes`` over it);
- past ``RATINGS_STREAM_THRESHOLD`` votes, the Parquet path: ``rating_battles_parquet`` writes
  the same rows to a Parquet file through one streamed ``COPY`` and ``ParquetVotes`` reads the
  file back a batch at a time. (The engine's own "spill", ``ratings.engine.stream_spill``, is
  its binary scratch file of a streamed fit; this module's file is the votes themselves.)
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd
from django.conf import settings
from django.db.models import Count, F, Max, Q, Sum

from answer_style import CONV_METADATA_KEYS
from arena.models import Battle
from ratings import engine
from ratings.categories import (
    Category,
    categories_from_languages,
    language_code,
    snapshot_categories,
)
from ratings.fits import fit_battles, scale_options, weighting_options
from ratings.selectors import rated_votes
from ratings.vote_columns import (
    PART_COLUMNS,
    StyleNotPlain,
    copy_parsed,
    style_complete,
    style_counts_of,
    style_counts_plain,
    style_part_sql,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Only a refit (a Celery worker's, or a command's) imports this module, so the web worker that
# shows the leaderboard loads neither numpy nor pandas; pyarrow loads only on the Parquet path.

logger = logging.getLogger(__name__)

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


BATTLE_COLUMNS = {
    "id": "vote_id",
    "battle__model_a__slug": "model_a",
    "battle__model_b__slug": "model_b",
    "rated_winner": "winner",  # the vote's, or a tie decided by reactions (RATINGS_COUNT_REACTIONS)
    "style": "conv_metadata",
    "battle__prompt__category": "prompt_category",
    "battle__prompt__language": "language",
    "turns": "turns",
    "prompt_chars": "prompt_chars",
    "prompt_has_code": "prompt_has_code",
    "prompt_has_image": "prompt_has_image",
    "code_ran": "code_ran",
}


def rated_votes_by_source() -> dict[str, int]:
    """The rated votes by their battle's source (pool, live, mixed, import), in that order."""
    counts = dict(rated_votes().order_by().values_list("battle__source").annotate(n=Count("id")))
    order = {value: i for i, value in enumerate(Battle.Source.values)}
    return {k: int(counts[k]) for k in sorted(counts, key=lambda k: order.get(k, len(order)))}


def rating_votes_mark() -> tuple[int, int, int]:
    """The votes' high-water mark (largest id, 0 when none), their count, and with
    RATINGS_COUNT_REACTIONS the sum of the ids of the ties reactions decide (else 0): a reaction
    that stops counting after the vote changes the verdicts with neither of the first two."""
    aggregates: dict[str, Any] = {"high": Max("id"), "n": Count("id")}
    if settings.RATINGS_COUNT_REACTIONS:
        aggregates["decided"] = Sum("id", filter=~Q(rated_winner=F("winner")))
    totals = rated_votes().aggregate(**aggregates)
    return int(totals["high"] or 0), int(totals["n"]), int(totals.get("decided") or 0)


def rating_battles() -> pd.DataFrame:
    """The rated votes as a battle table in vote-id order, one row per vote."""
    return _battles_frame(list(rated_votes().values_list(*BATTLE_COLUMNS)))


#: The Parquet file's style columns: the flat counts of ``conv_metadata`` (zeros where a vote lacks
#: them) and whether the vote has them all (the style-controlled views' votes).
PARQUET_STYLE_COLUMNS = tuple(CONV_METADATA_KEYS)
STYLE_COMPLETE_COLUMN = "style_complete"
_PARQUET_TEXT = ("model_a", "model_b", "winner", "prompt_category", "language")


def _parquet_schema() -> pa.Schema:
    import pyarrow as pa

    fields = [pa.field("vote_id", pa.int64(), nullable=False)]
    fields += [pa.field(c, pa.dictionary(pa.int32(), pa.string())) for c in _PARQUET_TEXT]
    fields += [pa.field(c, pa.int64()) for c in ("turns", "prompt_chars")]
    fields += [pa.field(c, pa.bool_()) for c in ("prompt_has_code", "prompt_has_image", "code_ran")]
    fields += [pa.field(STYLE_COMPLETE_COLUMN, pa.bool_())]
    fields += [pa.field(c, pa.int64()) for c in PARQUET_STYLE_COLUMNS]
    return pa.schema(fields)


def _battles_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(BATTLE_COLUMNS.values()))
    for column in ("prompt_category", "language"):
        frame[column] = frame[column].fillna("")
    return frame


_VOTE_COLUMNS = (
    "vote_id",
    *_PARQUET_TEXT,
    "turns",
    "prompt_chars",
    "prompt_has_code",
    "prompt_has_image",
    "code_ran",
)


def _copy_sql(*, exact: bool) -> tuple[str, list[Any], tuple[str, ...]]:
    """``COPY (...) TO STDOUT`` in CSV of the rated votes in vote-id order, its parameters and
    the names of its columns.

    The votes are ``rating_battles``' query (``rated_votes``) as a subquery, so the same votes are excluded and the columns mean the same. The style counts
    come as one jsonb value per part (``#>``: a number's text is the integer itself, anything
    else is quoted or ``null``; a missing part is empty), or, ``exact``, as the JSON text.
    """
    query = rated_votes().values_list(*BATTLE_COLUMNS).query
    # The SELECT's column order: values_list's, fields and annotations mixed (``selected``).
    assert query.selected is not None
    names = list(query.selected)
    inner, params = query.sql_with_params()
    aliases = ", ".join(f'"{BATTLE_COLUMNS[name]}"' for name in names)
    select = [
        {
            "prompt_category": "COALESCE(v.prompt_category, '')",
            "language": "COALESCE(v.language, '')",
        }.get(column, f"v.{column}")
        for column in _VOTE_COLUMNS
    ]
    columns: tuple[str, ...]
    if exact:
        select.append("v.conv_metadata::text")
        columns = (*_VOTE_COLUMNS, "conv_metadata")
    else:
        select += style_part_sql("v.conv_metadata")
        columns = (*_VOTE_COLUMNS, *PART_COLUMNS)
    # Only Django's compiled SQL and this module's constants are interpolated; the values stay
    # in ``params``.
    body = f"SELECT {', '.join(select)} FROM ({inner}) AS v({aliases}) ORDER BY v.vote_id"  # noqa: S608
    sql = f"COPY ({body}) TO STDOUT WITH (FORMAT csv)"
    return sql, list(params), columns


def _exact_counts(texts: list[str]) -> tuple[BoolArray, dict[str, IntArray]]:
    """``style_complete`` and the flat counts of JSON ``texts``, decoded as the ORM does and
    flattened by ``flatten_conv_metadata`` (which names a bad row by its place in the batch)."""
    return style_counts_of([json.loads(text) for text in texts])


def _copy_batch(data: bytes, schema: pa.Schema, columns: tuple[str, ...]) -> pa.RecordBatch:
    """One batch of the COPY's CSV rows (``columns``) in the Parquet file's schema."""
    import pyarrow as pa
    import pyarrow.csv as csv

    exact = "conv_metadata" in columns
    types = {f.name: f.type for f in schema if f.name in columns}
    types.update({c: pa.string() for c in _PARQUET_TEXT})
    types.update({c: pa.int64() for c in PART_COLUMNS})
    types["conv_metadata"] = pa.string()
    try:
        table = csv.read_csv(
            pa.py_buffer(data),
            read_options=csv.ReadOptions(column_names=list(columns), use_threads=False),
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                column_types={c: types[c] for c in columns},
                # Only an empty field is null (a missing part): a JSON null is text here.
                null_values=[""],
                quoted_strings_can_be_null=False,
                strings_can_be_null=False,
                true_values=["t"],
                false_values=["f"],
            ),
        )
    except pa.ArrowInvalid as exc:
        if exact:
            raise
        raise StyleNotPlain(f"a style count is not a plain integer ({exc})") from exc
    if exact:
        complete, counts = _exact_counts(table.column("conv_metadata").to_pylist())
    else:
        complete, counts = style_counts_plain(table)
    arrays: dict[str, pa.Array] = {c: table.column(c).combine_chunks() for c in _VOTE_COLUMNS}
    arrays[STYLE_COMPLETE_COLUMN] = pa.array(complete, type=pa.bool_())
    arrays.update({c: pa.array(v, type=pa.int64()) for c, v in counts.items()})
    return pa.RecordBatch.from_arrays(
        [
            arrays[f.name].dictionary_encode() if pa.types.is_dictionary(f.type) else arrays[f.name]
            for f in schema
        ],
        schema=schema,
    )


def _copy_batches(*, batch_rows: int, exact: bool) -> Iterator[pa.RecordBatch]:
    """The rated votes in the Parquet file's schema, ``batch_rows`` at a time, from one ``COPY``.

    PostgreSQL sends a COPY's rows one message each as it produces them, so at most one batch
    of CSV text is held here whatever the number of votes. The connection is busy with the
    COPY until the last row is read: nothing else may use it meanwhile. A ``StyleNotPlain`` batch
    ends the iteration after the rest of the rows are read (not cancelled: a cancel would
    abort the caller's transaction).
    """
    schema = _parquet_schema()
    sql, params, columns = _copy_sql(exact=exact)
    yield from copy_parsed(
        sql,
        params,
        lambda data: _copy_batch(data, schema, columns),
        batch_rows=batch_rows,
        errors=(StyleNotPlain,),
    )


@dataclass(frozen=True)
class BattlesParquet:
    """What ``rating_battles_parquet`` wrote: votes, Parquet row groups, largest vote id."""

    rows: int
    row_groups: int
    high_water: int
    exact: bool = False  # whether the votes were read again with their style counts as JSON


def rating_battles_parquet(
    path: Path,
    *,
    batch_rows: int,
    observe: Callable[[pa.RecordBatch], None] | None = None,
    restart: Callable[[], None] | None = None,
) -> BattlesParquet:
    """Write the rated votes to the Parquet file ``path``, one row group per ``batch_rows`` votes.

    The votes are ``rating_battles()``' in the same order, read by one ``COPY ... TO STDOUT``
    in CSV that PostgreSQL sends with each style count's part as its own column, so no row
    becomes Python objects. A vote whose counts are not all plain integers (or not all
    missing) would read differently that way: the file is then written again from a second
    COPY that sends the counts as JSON, decoded and flattened as ``rating_battles`` would be
    (``restart`` is called first, so ``observe`` counts each vote once).

    Columns: ``vote_id``; ``model_a``, ``model_b``, ``winner``, ``prompt_category`` and
    ``language`` dictionary-encoded (``""`` where the prompt has none); ``turns``,
    ``prompt_chars``, ``prompt_has_code``, ``prompt_has_image``, ``code_ran`` (what the
    leaderboard's categories read);
    ``style_complete`` and the flat style counts of ``answer_style.CONV_METADATA_KEYS`` (zero
    where ``style_complete`` is false), which ``ratings.engine.read_battles`` accepts.
    ``observe`` sees each written batch before the next one is read (memory stays at about
    one batch); it must not use the database connection, which the COPY holds.
    """
    from django.db import NotSupportedError, connection

    if connection.vendor != "postgresql":
        raise NotSupportedError(
            f"the Parquet path reads votes with PostgreSQL's COPY, not {connection.vendor}'s"
        )
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    if observe is not None and restart is None:
        raise ValueError("observe needs restart: votes read again show their batches again")
    try:
        return _parquet_write(path, batch_rows=batch_rows, observe=observe, exact=False)
    except StyleNotPlain as exc:
        logger.warning("ratings: votes read again with JSON style counts: %s", exc)
        if restart is not None:
            restart()
        return _parquet_write(path, batch_rows=batch_rows, observe=observe, exact=True)


def _parquet_write(
    path: Path,
    *,
    batch_rows: int,
    observe: Callable[[pa.RecordBatch], None] | None,
    exact: bool,
) -> BattlesParquet:
    import pyarrow.parquet as pq

    rows = groups = high = 0
    with pq.ParquetWriter(path, _parquet_schema()) as writer:
        for batch in _copy_batches(batch_rows=batch_rows, exact=exact):
            writer.write_batch(batch, row_group_size=batch.num_rows)
            if observe is not None:
                observe(batch)
            rows += batch.num_rows
            groups += 1
            high = max(high, int(batch.column(0)[-1].as_py()))
    return BattlesParquet(rows=rows, row_groups=groups, high_water=high, exact=exact)


class Votes(Protocol):
    """The rated votes as ``snapshot_build`` reads them: in memory, or written to Parquet."""

    def categories(self, *, long_prompt_chars: int) -> list[Category]: ...

    def census(self, category: Category) -> tuple[int, int]:
        """The category's votes and the models in them."""
        ...

    def view(self, category: Category, style: str) -> pd.DataFrame:
        """The view's battles: at least ``model_a``, ``model_b``, ``winner``."""
        ...

    def fit(
        self,
        category: Category,
        style: str,
        params: dict[str, Any],
        *,
        shown: set[str] | None = None,
    ) -> engine.RatingResult:
        """The view's fit; ``engine.CannotRateError`` when it cannot be rated. ``shown``: the
        models the fragility audit ranks."""
        ...

    def models(self) -> set[str]: ...

    def pair_counts(self) -> list[tuple[str, str, int]]: ...

    def pair_records(self) -> list[PairRecord]:
        """Each pair's rated outcomes, ``(low, high, low_wins, high_wins, ties)``."""
        ...


#: A pair's rated outcomes: ``(slug, slug, first's wins, second's wins, ties)``, slugs in string
#: order, counted on the verdict the fit reads (``rated_winner``); both-bad counts as a tie.
PairRecord = tuple[str, str, int, int, int]


def _record_keys(
    rank_a: IntArray, rank_b: IntArray, winner_a: BoolArray, winner_b: BoolArray, n_models: int
) -> tuple[IntArray, IntArray]:
    """Per row, the pair's key (``low * n_models + high``) and the outcome seen from the pair's
    first model: 0 it won, 1 the other won, 2 a tie."""
    swapped = rank_a > rank_b
    low, high = np.minimum(rank_a, rank_b), np.maximum(rank_a, rank_b)
    low_won = np.where(swapped, winner_b, winner_a)
    high_won = np.where(swapped, winner_a, winner_b)
    outcome = np.where(low_won, 0, np.where(high_won, 1, 2)).astype(np.int64)
    return low * n_models + high, outcome


def _tally_records(
    into: dict[tuple[str, str], list[int]], ordered: list[str], keys: IntArray, outcome: IntArray
) -> None:
    """Add the rows' outcomes to ``into`` (by slug pair), one ``bincount`` per batch."""
    if not len(keys):
        return
    codes = keys * 3 + outcome
    found, counts = np.unique(codes, return_counts=True)
    n = len(ordered)
    for code, count in zip(found.tolist(), counts.tolist(), strict=True):
        pair, kind = divmod(code, 3)
        slugs = (ordered[pair // n], ordered[pair % n])
        into.setdefault(slugs, [0, 0, 0])[kind] += count


def _records_list(records: dict[tuple[str, str], list[int]]) -> list[PairRecord]:
    return [(a, b, w, losses, t) for (a, b), (w, losses, t) in sorted(records.items())]


class _Weighting:
    """The run's weighting options, computed once (the draw propensity reads the sampling
    policy from the database) for every view a snapshot fits."""

    _weights: tuple[str, dict[str, Any]] | None = None

    def _weighting(self, params: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps(
            [params.get(k) for k in ("position", "inverse_propensity", "propensity_min_share")]
        )
        if self._weights is None or self._weights[0] != key:
            self._weights = (key, weighting_options(params))
        return self._weights[1]


class FrameVotes(_Weighting):
    """The votes in one DataFrame (``rating_battles``)."""

    def __init__(self, battles: pd.DataFrame) -> None:
        self.battles = battles
        self.styled = battles["conv_metadata"].map(style_complete) if len(battles) else None
        self._subset: tuple[str, pd.DataFrame] | None = None  # the current category's rows

    def categories(self, *, long_prompt_chars: int) -> list[Category]:
        return snapshot_categories(self.battles, long_prompt_chars=long_prompt_chars)

    def _rows(self, category: Category) -> pd.DataFrame:
        if self._subset is None or self._subset[0] != category.key:
            battles = self.battles
            rows = battles[category.select(battles)] if len(battles) else battles
            self._subset = (category.key, rows)
        return self._subset[1]

    def census(self, category: Category) -> tuple[int, int]:
        rows = self._rows(category)
        return len(rows), len(set(rows["model_a"]) | set(rows["model_b"]))

    def view(self, category: Category, style: str) -> pd.DataFrame:
        rows = self._rows(category)
        if style == "on" and len(rows) and self.styled is not None:
            return rows[self.styled.loc[rows.index].astype(bool)]
        return rows

    def fit(
        self,
        category: Category,
        style: str,
        params: dict[str, Any],
        *,
        shown: set[str] | None = None,
    ) -> engine.RatingResult:
        rows = self.view(category, style)
        return fit_battles(
            rows,
            style_control=style == "on",
            params=params,
            shown=shown,
            weighting=self._weighting(params),
        )

    def models(self) -> set[str]:
        return set(self.battles["model_a"]) | set(self.battles["model_b"])

    def pair_counts(self) -> list[tuple[str, str, int]]:
        return _pair_counts(self.battles)

    def pair_records(self) -> list[PairRecord]:
        battles = self.battles
        if not len(battles):
            return []
        a = battles["model_a"].astype(str).to_numpy()
        b = battles["model_b"].astype(str).to_numpy()
        ordered = sorted(set(a) | set(b))
        rank = {slug: i for i, slug in enumerate(ordered)}
        winner = battles["winner"].astype(str).to_numpy()
        keys, outcome = _record_keys(
            np.array([rank[s] for s in a], dtype=np.int64),
            np.array([rank[s] for s in b], dtype=np.int64),
            winner == "model_a",
            winner == "model_b",
            len(ordered),
        )
        records: dict[tuple[str, str], list[int]] = {}
        _tally_records(records, ordered, keys, outcome)
        return _records_list(records)


#: The largest view whose fragility the streamed path audits (in memory: see ``fit``).
FRAGILITY_MAX_VOTES = 2_000_000

# Rows per batch when the Parquet file is read back. A row is a few numeric and dictionary
# columns (RATINGS_STREAM_BATCH_ROWS, the row group written per COPY batch, may be as large).
PARQUET_READ_ROWS = 50_000

# What a category's rule and the style views read from the Parquet file.
_SELECT_COLUMNS = [
    "winner",
    "prompt_category",
    "prompt_has_code",
    "prompt_has_image",
    "code_ran",
    "prompt_chars",
    "turns",
    "language",
    STYLE_COMPLETE_COLUMN,
]


class ParquetVotes(_Weighting):
    """The votes written to Parquet (``rating_battles_parquet``), read back a batch at a time.

    The write pass itself counts what needs every vote once (languages, models, pairs); each
    category's census is one more pass over the selection columns; each fit is
    ``engine.rate_parquet`` with a row mask that applies the same ``Category.select`` to each
    batch (and, with style control, keeps the votes with style counts).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.batch_rows = PARQUET_READ_ROWS
        self._census: dict[str, tuple[int, int]] = {}
        self._categories: list[Category] = []
        self.restart()

    def restart(self) -> None:
        """Forget what the write pass counted (the file is being written again)."""
        self.languages: dict[str, int] = {}
        self.rated: set[str] = set()
        self.pairs: Counter[tuple[str, str]] = Counter()
        self.records: dict[tuple[str, str], list[int]] = {}

    def observe(self, batch: pa.RecordBatch) -> None:
        """Count one written batch (the file's schema) as ``language_counts``, ``models`` and
        ``_pair_counts`` count a frame: per dictionary entry, not per row."""
        language = batch.column("language")
        per_value = np.bincount(language.indices, minlength=len(language.dictionary))
        # A batch's dictionary lists its values in order of first appearance, so the codes
        # are met in that order too.
        for value, n in zip(language.dictionary.to_pylist(), per_value.tolist(), strict=True):
            code = language_code(value)
            if code and n:
                self.languages[code] = self.languages.get(code, 0) + n
        a, b = batch.column("model_a"), batch.column("model_b")
        slugs_a, slugs_b = a.dictionary.to_pylist(), b.dictionary.to_pylist()
        self.rated.update(slugs_a, slugs_b)
        # Each slug's rank in string order: the smaller rank of a pair is its first slug.
        ordered = sorted(set(slugs_a) | set(slugs_b))
        rank = {slug: i for i, slug in enumerate(ordered)}
        rank_a = np.array([rank[s] for s in slugs_a], dtype=np.int64)[a.indices]
        rank_b = np.array([rank[s] for s in slugs_b], dtype=np.int64)[b.indices]
        low, high = np.minimum(rank_a, rank_b), np.maximum(rank_a, rank_b)
        keys, counts = np.unique(low * len(ordered) + high, return_counts=True)
        for key, n in zip(keys.tolist(), counts.tolist(), strict=True):
            self.pairs[(ordered[key // len(ordered)], ordered[key % len(ordered)])] += n
        winner = batch.column("winner")
        verdicts = np.array(winner.dictionary.to_pylist(), dtype=object)[winner.indices]
        pair_keys, outcome = _record_keys(
            rank_a, rank_b, verdicts == "model_a", verdicts == "model_b", len(ordered)
        )
        _tally_records(self.records, ordered, pair_keys, outcome)

    def _batches(self, columns: list[str]) -> Iterator[pd.DataFrame]:
        import pyarrow.parquet as pq  # only a streamed refit reads Parquet

        parquet = pq.ParquetFile(self.path)
        for batch in parquet.iter_batches(batch_size=self.batch_rows, columns=columns):
            yield batch.to_pandas()

    def categories(self, *, long_prompt_chars: int) -> list[Category]:
        self._categories = categories_from_languages(
            self.languages, long_prompt_chars=long_prompt_chars
        )
        return self._categories

    def census(self, category: Category) -> tuple[int, int]:
        if not self._census:
            # One pass for every category: votes and the set of models each one holds.
            votes = dict.fromkeys((c.key for c in self._categories), 0)
            models: dict[str, set[str]] = {c.key: set() for c in self._categories}
            for frame in self._batches([*_SELECT_COLUMNS, "model_a", "model_b"]):
                for c in self._categories:
                    keep = c.select(frame).to_numpy(dtype=bool)
                    votes[c.key] += int(keep.sum())
                    models[c.key].update(frame["model_a"].to_numpy(dtype=object)[keep])
                    models[c.key].update(frame["model_b"].to_numpy(dtype=object)[keep])
            self._census = {key: (votes[key], len(models[key])) for key in votes}
        return self._census[category.key]

    def _where(self, category: Category, style: str) -> Callable[[pa.RecordBatch], BoolArray]:
        def where(batch: pa.RecordBatch) -> BoolArray:
            return _keep(batch.select(_SELECT_COLUMNS).to_pandas(), category, style)

        return where

    def view(self, category: Category, style: str) -> pd.DataFrame:
        # Only for views that are not rated (too few votes, or a style fit with no maximum):
        # their three columns are gathered in memory for the records of every model.
        parts = [
            frame.loc[_keep(frame, category, style), _TABLE]
            for frame in self._batches([*_SELECT_COLUMNS, *_TABLE])
        ]
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype=str) for c in _TABLE})
        return pd.concat(parts, ignore_index=True).astype(str)

    def fit(
        self,
        category: Category,
        style: str,
        params: dict[str, Any],
        *,
        shown: set[str] | None = None,
    ) -> engine.RatingResult:
        result = engine.rate_parquet(
            self.path,
            style_control=style == "on",
            ci="sandwich",  # the only interval the streamed fit computes (snapshot_params)
            where=self._where(category, style),
            where_columns=_SELECT_COLUMNS,
            batch_rows=self.batch_rows,
            spill_dir=self.path.parent,  # the engine's spill, removed with the votes' file
            **scale_options(params),
            **self._weighting(params),
        )
        top = int(params.get("fragility_top") or 0)
        if top and shown is not None and result.n_battles <= FRAGILITY_MAX_VOTES:
            # The audit refits the view many times, so it holds the view's battles in memory:
            # the three columns and, with style control, the eight counts (some 100 MB for a
            # million votes), for the audited views only.
            frame = self._audit_frame(category, style)
            audited = engine.rate(
                frame,
                style_control=style == "on",
                ci="sandwich",
                fragility_top=top,
                fragility_among=shown,
                **scale_options(params),
                **self._weighting(params),
            )
            result = dataclasses.replace(result, fragility=audited.fragility)
        return result

    def _audit_frame(self, category: Category, style: str) -> pd.DataFrame:
        columns = [*_TABLE, *(PARQUET_STYLE_COLUMNS if style == "on" else ())]
        parts = [
            frame.loc[_keep(frame, category, style), columns]
            for frame in self._batches([*_SELECT_COLUMNS, *columns])
        ]
        frame = pd.concat(parts, ignore_index=True)
        for column in _TABLE:
            frame[column] = frame[column].astype(str)
        return frame

    def models(self) -> set[str]:
        return self.rated

    def pair_counts(self) -> list[tuple[str, str, int]]:
        return [(a, b, n) for (a, b), n in sorted(self.pairs.items())]

    def pair_records(self) -> list[PairRecord]:
        return _records_list(self.records)


_TABLE = ["model_a", "model_b", "winner"]


def _keep(frame: pd.DataFrame, category: Category, style: str) -> BoolArray:
    """Which of the Parquet file's rows ``frame`` are in the category's view ``style``."""
    keep: BoolArray = np.asarray(category.select(frame), dtype=bool)
    if style == "on":
        keep = keep & np.asarray(frame[STYLE_COMPLETE_COLUMN], dtype=bool)
    return keep


def _pair_counts(battles: pd.DataFrame) -> list[tuple[str, str, int]]:
    """Rated battles per unordered pair of models, ``[slug, slug, n]`` (slugs in order)."""
    if not len(battles):
        return []
    a = battles["model_a"].astype(str)
    b = battles["model_b"].astype(str)
    low = a.where(a < b, b)
    high = b.where(a < b, a)
    counts = pd.DataFrame({"low": low, "high": high}).value_counts(sort=False)
    return [(str(x), str(y), int(n)) for (x, y), n in sorted(counts.items())]
