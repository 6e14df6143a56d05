"""The fairness ledger's counts (``arena.ledger``) on a small arena (``ledger_history``): battles
and votes before release, private variants published or withdrawn, shares of the appearances
against an equal share, exported rows, and retirements with their reasons."""

from datetime import UTC, datetime, timedelta

import pytest

from arena.ledger import (
    ledger_counts,
    ledger_counts_from_json,
    ledger_counts_json,
    ledger_view,
    private_spans,
)
from arena.services.models import model_reactivate, model_retire
from arena.tests.ledger_history import ledger_history

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 30, 12, tzinfo=UTC)


@pytest.fixture
def models(make_vote):
    return ledger_history(make_vote, NOW)


def by_slug(counts):
    return {m.slug: m for m in counts.models}


def test_battles_and_votes_before_release_are_counted_per_model(models):
    counts = by_slug(ledger_counts(now=NOW))
    # Private until published 20 days ago: its two earlier battles, not the later one.
    assert (counts["acme-secret"].prerelease_battles, counts["acme-secret"].battles) == (2, 3)
    assert counts["acme-secret"].prerelease_votes == 2
    assert counts["acme-secret"].first_public == NOW - timedelta(days=20)
    assert counts["acme-secret"].ever_public
    # Never public, then withdrawn: every battle was private, and it is still listed.
    withdrawn = counts["acme-withdrawn"]
    assert (withdrawn.prerelease_battles, withdrawn.prerelease_votes) == (2, 2)
    assert not withdrawn.ever_public and withdrawn.first_public is None
    # Before its release date (public in the arena all along).
    assert (counts["bolt-main"].prerelease_battles, counts["bolt-main"].battles) == (1, 3)
    assert counts["bolt-main"].prerelease_votes == 1
    for slug in ("acme-one", "bolt-old", "local-model"):
        assert counts[slug].prerelease_battles == 0


def test_appearances_votes_and_exported_rows_leave_out_what_the_export_does(models):
    counts = ledger_counts(now=NOW)
    # Nine battles (the environment's aside); eight in the last 30 days.
    assert (counts.battles, counts.battles_recent) == (9, 8)
    # Anonymous battles with an unflagged vote: 1, 2, 3, 4, 7 and 8.
    assert counts.exported == 6
    per = by_slug(counts)
    one = per["acme-one"]
    assert (one.battles, one.battles_recent, one.votes, one.exported) == (8, 7, 7, 5)
    assert (per["bolt-main"].votes, per["bolt-main"].exported) == (2, 1)
    assert (per["acme-withdrawn"].votes, per["acme-withdrawn"].exported) == (2, 1)
    assert (per["bolt-old"].battles, per["bolt-old"].battles_recent) == (1, 0)
    providers = {p.name: p for p in counts.providers}
    # A battle between two of a provider's models counts once for it.
    assert (providers["Acme AI"].battles, providers["Acme AI"].votes) == (9, 8)
    assert providers["Acme AI"].exported == 6
    assert (providers["Bolt Labs"].battles, providers["Bolt Labs"].exported) == (4, 2)
    # A model without an organisation goes under its endpoint's name.
    assert providers["Local vLLM"].battles == 1 and per["local-model"].provider == "Local vLLM"


def test_shares_of_the_appearances_stand_against_an_equal_share(models):
    ledger = ledger_view(ledger_counts(now=NOW))
    # All time: six models were in a battle; the last 30 days: five (bolt-old retired).
    assert (ledger.equal_models, ledger.equal_models_recent) == (6, 5)
    assert ledger.equal_share == pytest.approx(1 / 6)
    providers = {p.name: p for p in ledger.providers}
    acme = providers["Acme AI"]
    lines = {m.counts.slug: m for m in acme.models}
    assert lines["acme-one"].share == pytest.approx(8 / 18)
    assert lines["acme-one"].share_recent == pytest.approx(7 / 16)
    assert acme.share == pytest.approx(13 / 18) and acme.equal_share == pytest.approx(3 / 6)
    bolt = providers["Bolt Labs"]
    assert bolt.share_recent == pytest.approx(3 / 16)
    assert bolt.equal_share_recent == pytest.approx(1 / 5)
    shares = [m.share for p in ledger.providers for m in p.models]
    assert sum(shares) == pytest.approx(1.0)
    # The providers with most battles first.
    assert [p.name for p in ledger.providers] == ["Acme AI", "Bolt Labs", "Local vLLM"]


def test_retirements_show_with_their_dates_and_reasons_and_at_once(models):
    counts = ledger_counts(now=NOW)
    ledger = ledger_view(counts)
    providers = {p.name: p for p in ledger.providers}
    (bolt_retired,) = providers["Bolt Labs"].retirements
    assert (bolt_retired.slug, bolt_retired.reason) == ("bolt-old", "Endpoint shut down")
    assert bolt_retired.at == NOW - timedelta(days=45)
    acme = providers["Acme AI"]
    assert [(e.slug, e.change) for e in acme.events] == [
        ("acme-secret", "published"),
        ("acme-withdrawn", "retired"),
    ]
    assert [m.counts.slug for m in acme.prerelease] == ["acme-secret", "acme-withdrawn"]
    assert providers["Local vLLM"].retirements == []

    # A retirement after the count shows on the next view of the same counts.
    model_retire(model=models["acme-one"], reason="Superseded")
    acme = {p.name: p for p in ledger_view(counts).providers}["Acme AI"]
    one = next(m for m in acme.models if m.counts.slug == "acme-one")
    assert not one.active and acme.retirements[-1].reason == "Superseded"
    model_reactivate(model=models["acme-one"], reason="Back by request")
    acme = {p.name: p for p in ledger_view(counts).providers}["Acme AI"]
    assert [e.change for e in acme.events][-2:] == ["retired", "reactivated"]
    assert next(m for m in acme.models if m.counts.slug == "acme-one").active


def test_a_model_retired_before_retirements_were_recorded_says_so(db):
    from arena.tests.factories import ArenaModelFactory, BattleFactory

    old = ArenaModelFactory(slug="legacy", is_active=False, organization="Acme AI")
    BattleFactory(model_a=old)
    lines = {m.counts.slug: m for p in ledger_view(ledger_counts()).providers for m in p.models}
    assert lines["legacy"].retired_unrecorded and not lines["legacy"].active


def test_the_counts_read_back_from_json_as_they_were(models):
    counts = ledger_counts(now=NOW)
    kept = ledger_counts_json(counts)
    assert "counted_at" not in kept  # the snapshot's own time
    assert ledger_counts_from_json(kept, counted_at=NOW) == counts


def test_private_spans_follow_the_recorded_visibility():
    t = [datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3)]
    assert private_spans([], public_now=True) == []
    assert private_spans([], public_now=False) == [(None, None)]
    assert private_spans([("published", t[0])], public_now=True) == [(None, t[0])]
    assert private_spans(
        [("published", t[0]), ("unpublished", t[1]), ("retired", t[2])], public_now=False
    ) == [(None, t[0]), (t[1], None)]
    assert private_spans([("unpublished", t[0]), ("published", t[1])], public_now=True) == [
        (t[0], t[1])
    ]
