"""The fairness ledger on /transparency, in English and in French, and as JSON: per provider,
the models tested before release, the shares of battles against an equal share, votes and
exported rows, retirements with their reasons; counted with the snapshot, retirements at once."""

import re

import pytest
from django.utils import timezone

from arena.models import ModelStatusChange
from arena.services.models import model_retire
from arena.tests.ledger_history import ledger_history
from ratings import services
from ratings.models import LeaderboardSnapshot


@pytest.fixture
def models(make_vote, settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 2
    return ledger_history(make_vote, timezone.now())


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def section(html: str) -> str:
    return html.split('data-testid="fairness-ledger"', 1)[1].split("</section>", 1)[0]


def provider(html: str, name: str) -> str:
    return section(html).split(f'data-provider="{name}"', 1)[1].split("</article>", 1)[0]


def row(html: str, slug: str) -> str:
    return html.split(f'data-ledger-model="{slug}"', 1)[1].split("</tr>", 1)[0]


def test_the_ledger_lists_each_provider_with_its_models_and_retirements(client, models):
    html = client.get("/transparency").content.decode()
    ledger = section(html)
    assert "Fairness ledger" in html
    assert re.findall(r'data-provider="([^"]*)"', ledger) == [
        "Acme AI",
        "Bolt Labs",
        "Local vLLM",
    ]
    acme = provider(html, "Acme AI")
    # The withdrawn variant: its private battles, never published, retired with its reason.
    withdrawn = text(row(acme, "acme-withdrawn"))
    assert "retired, never published" in withdrawn and "2 battles, 2 votes" in withdrawn
    secret = text(acme.split('data-testid="ledger-prerelease"', 1)[1].split("</p>", 1)[0])
    assert "Acme Secret , 2 battles and 2 votes (public since" in secret
    assert "Acme Withdrawn , 2 battles and 2 votes (never published)" in secret
    events = text(acme.split('data-testid="ledger-retirements"', 1)[1])
    assert "Acme Withdrawn retired — Variant withdrawn after private testing" in events
    assert "Acme Secret made public — Released as Acme Two" in events
    # Sampling against the equal share: acme-one was in 8 of the 18 appearances (44.4%),
    # 2.7 times the equal share of one in six models.
    one = text(row(acme, "acme-one"))
    assert "44.4% (2.7× equal)" in one
    summary = text(acme.split('data-testid="ledger-summary"', 1)[1].split("</p>", 1)[0])
    assert "3 models; in 9 battles with 8 votes; 72.2% of the appearances (equal share: 50.0%)" in (
        summary
    )
    assert "6 rows of the default export" in summary
    # Bolt: retired before its release was even considered; the model under its endpoint name.
    bolt = text(provider(html, "Bolt Labs"))
    assert "Bolt Old retired — Endpoint shut down" in bolt
    # Before its release date, though public in the arena; released since.
    assert "Bolt Main , 1 battle and 1 vote (released" in bolt
    # A retired model with no recent battle has a share but no equal to stand against.
    old_recent = text(row(html, "bolt-old").split('data-kind="share-recent"', 1)[1])
    assert old_recent.startswith("> 0.0%") and "equal" not in old_recent.split("</td>")[0]
    assert "No model retired." in text(provider(html, "Local vLLM"))
    assert "holds 6 rows" in text(ledger.split('data-testid="ledger-exports"', 1)[1])
    assert 'href="/transparency/ledger.json"' in ledger


def test_the_ledger_is_in_french(client, models):
    html = client.get("/transparency", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    ledger = text(section(html))
    assert "Registre d’équité" in text(html)
    acme = provider(html, "Acme AI")
    assert "retiré, jamais publié" in text(row(acme, "acme-withdrawn"))
    assert "2 duels, 2 votes" in text(row(acme, "acme-withdrawn"))
    assert "44,4% (2,7× la part égale)" in text(row(acme, "acme-one"))
    assert "Aucun modèle retiré." in text(provider(html, "Local vLLM"))
    # Staff's reason stays in their words.
    assert "Acme Withdrawn retiré — Variant withdrawn after private testing" in text(acme)
    for english in ("Fairness ledger", "Before release", "never published", "No model retired"):
        assert english not in ledger


def test_the_ledger_as_json(client, models):
    body = client.get("/transparency/ledger.json").json()
    assert body["window_days"] == 30 and body["battles"] == 9 and body["exported"] == 6
    providers = {p["name"]: p for p in body["providers"]}
    acme = {m["slug"]: m for m in providers["Acme AI"]["models"]}
    assert acme["acme-withdrawn"]["prerelease_battles"] == 2
    assert acme["acme-withdrawn"]["ever_public"] is False
    assert [(e["slug"], e["change"], e["reason"]) for e in providers["Bolt Labs"]["events"]] == [
        ("bolt-old", "retired", "Endpoint shut down")
    ]


def test_the_counts_are_the_snapshots_and_a_retirement_shows_at_once(client, models, make_vote):
    snapshot = services.snapshot_refresh().snapshot
    assert snapshot.payload["ledger"]["battles"] == 9
    # A battle after the snapshot waits for the next one ...
    make_vote(models["acme-one"], models["bolt-main"], "model_a")
    assert "9 battles" in text(provider(client.get("/transparency").content.decode(), "Acme AI"))
    # ... a retirement does not.
    model_retire(model=models["bolt-main"], reason="Licence ended")
    html = client.get("/transparency").content.decode()
    assert "Bolt Main retired — Licence ended" in text(provider(html, "Bolt Labs"))
    assert ModelStatusChange.objects.filter(model=models["bolt-main"]).count() == 1
    assert LeaderboardSnapshot.objects.count() == 1


def test_a_snapshot_written_before_the_ledger_has_it_counted_once(client, models):
    snapshot = services.snapshot_refresh().snapshot
    payload = dict(snapshot.payload)
    del payload["ledger"]
    LeaderboardSnapshot.objects.create(
        vote_high_water=snapshot.vote_high_water,
        n_votes=snapshot.n_votes,
        params=snapshot.params,
        params_digest=snapshot.params_digest,
        duration_seconds=0.0,
        payload=payload,
    )
    html = client.get("/transparency").content.decode()
    assert re.findall(r'data-ledger-model="([^"]+)"', html)[:1] == ["acme-one"]
    assert "in 9 battles" in text(provider(html, "Acme AI"))


def test_the_ledger_says_none_retired_on_an_empty_arena(client, db):
    html = client.get("/transparency").content.decode()
    assert "No model has been served yet." in text(section(html))
