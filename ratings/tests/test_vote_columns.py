"""Votes read as columns (``ratings.vote_columns``): PostgreSQL's COPY reads what ``values_list``
reads, style counts that are not plain integers are read again as JSON, text codes compare as
the texts do, and a moment is its exact microseconds since the epoch."""

import logging
from datetime import UTC, datetime

import numpy as np
import pytest

from arena.models import Vote
from arena.selectors import votes_for_anomaly
from arena.tests.factories import ArenaModelFactory
from ratings import vote_columns
from ratings.vote_columns import VoteColumns

pytestmark = pytest.mark.django_db

FIELDS: dict[str, vote_columns.Kind] = {
    "id": "int",
    "voter_id": "text",
    "battle__model_a__slug": "text",
    "style": "style",
    "ip_hash": "text",
    "created_at": "micros",
}
MOMENT = datetime(2026, 3, 1, 12, 0, 0, 123457, tzinfo=UTC)


@pytest.fixture
def votes(make_vote):
    """Votes with full and empty style counts, addresses or none, voter ids whose order is not
    their order of arrival."""
    a, b = ArenaModelFactory(slug="zeta"), ArenaModelFactory(slug="Alpha")
    made = [make_vote(a, b), make_vote(b, a, "tie"), make_vote(a, b, "model_b")]
    for vote, voter, address in zip(made, ("zoë", "Zed", "a"), ("", "ff01", "00aa"), strict=True):
        Vote.objects.filter(pk=vote.pk).update(voter_id=voter, ip_hash=address)
    Vote.objects.filter(pk=made[1].pk).update(style={})
    Vote.objects.filter(pk=made[2].pk).update(created_at=MOMENT)
    return made


def same(got: VoteColumns, want: VoteColumns) -> None:
    assert got.n == want.n
    for name, values in want.numbers.items():
        assert got.numbers[name].tolist() == values.tolist(), name
    for name, texts in want.texts.items():
        mine = got.texts[name]
        assert mine.values[mine.codes].tolist() == texts.values[texts.codes].tolist(), name
    assert want.style is not None and got.style is not None
    assert got.style[0].tolist() == want.style[0].tolist()
    for key, counts in want.style[1].items():
        assert got.style[1][key].tolist() == counts.tolist(), key


def test_text_codes_compare_as_the_texts_do_and_a_moment_is_exact(votes):
    read = vote_columns.vote_columns(votes_for_anomaly(), FIELDS, order="id")
    voters = read.texts["voter_id"]
    assert voters.values.tolist() == sorted(["zoë", "Zed", "a"])
    assert voters.values[voters.codes].tolist() == ["zoë", "Zed", "a"]  # in vote-id order
    assert read.numbers["created_at"][2] == 1_772_366_400_123_457  # 2026-03-01 12:00:00.123457
    # Full counts, none, full: the second is not complete and counts 0.
    assert read.style is not None
    complete, counts = read.style
    assert complete.tolist() == [True, False, True]
    assert counts["sum_assistant_a_tokens"][0] > 0
    assert all(counts[key][1] == 0 for key in counts)


@pytest.mark.postgres
def test_the_copy_read_gives_the_columns_values_list_gives(votes):
    queryset = votes_for_anomaly()
    same(
        vote_columns._copy_columns(queryset, FIELDS, order="id", exact=False),
        vote_columns._orm_columns(queryset, FIELDS, order="id"),
    )


@pytest.mark.postgres
@pytest.mark.parametrize("odd", ["float", "key missing"])
def test_style_counts_that_are_not_plain_integers_are_read_again_as_json(votes, caplog, odd):
    style = dict(votes[0].style)
    if odd == "float":
        style["sum_assistant_a_tokens"] = 12.0  # the ORM reads 12; its text is not an integer's
    else:
        del style["bold_count_b"]  # some counts and not others: not style-complete, zeros
    Vote.objects.filter(pk=votes[0].pk).update(style=style)
    queryset = votes_for_anomaly()
    with caplog.at_level(logging.WARNING, logger="ratings.vote_columns"):
        read = vote_columns.vote_columns(queryset, FIELDS, order="id")
    assert "read again with JSON style counts" in caplog.text
    assert read.style is not None
    assert read.style[1]["sum_assistant_a_tokens"][0] == (12 if odd == "float" else 0)
    same(read, vote_columns._orm_columns(queryset, FIELDS, order="id"))
    assert np.array_equal(read.numbers["id"], sorted(v.pk for v in votes))
