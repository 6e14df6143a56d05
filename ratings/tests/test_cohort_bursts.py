"""Bursts of new sources are held out before every refit (``ratings.cohorts``): flagged
``cohort_burst`` while the burst stands out against every other vote, brought back when it no
longer does, never again once staff cleared it; the demo's imported history is trusted."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from arena.models import Vote
from arena.services.flags import COHORT_BURST, votes_flag_clear
from ratings import services
from ratings.cohorts import cohorts_quarantine_run


@pytest.fixture(autouse=True)
def defaults(settings):
    settings.RATINGS_MIN_CATEGORY_VOTES = 10
    settings.RATINGS_ESTABLISHED_MIN_VOTES = 0
    settings.RATINGS_SOURCE_MAX_SHARE = 0  # the burst test alone
    settings.RATINGS_COHORT_TEST = True
    settings.RATINGS_COHORT_WINDOWS_HOURS = [24.0, 168.0]
    settings.RATINGS_COHORT_Z_DETECT = 3.0
    settings.RATINGS_COHORT_Z_RELEASE = 1.0
    settings.RATINGS_COHORT_TRUSTED_DAYS = 30
    settings.RATINGS_COHORT_MIN_VOTES = 10


def _history(make_vote, models, *, n=300, days=28, seed=3) -> None:
    """The arena's history: ``n`` more Bradley-Terry votes among ``models`` (strongest first,
    as ``rated_models`` draws them), and every vote so far spread over the ``days`` before
    yesterday, each from a session and address of its own."""
    import random

    rng = random.Random(seed)
    strength = dict(zip(models, (4.0, 1.5, 0.0), strict=True))
    for _ in range(n):
        a, b = rng.sample(models, 2)
        p_a = 1 / (1 + 10 ** ((strength[b] - strength[a]) / 2))
        make_vote(a, b, "model_a" if rng.random() < p_a else "model_b")
    now = timezone.now()
    for i, pk in enumerate(Vote.objects.order_by("pk").values_list("pk", flat=True)):
        when = now - timedelta(days=1 + days * rng.random())
        Vote.objects.filter(pk=pk).update(
            created_at=when, ip_hash=f"{i:064x}", voter_id=f"honest-{i}"
        )


def _burst(make_vote, winner, loser, n, *, tag="bot"):
    """``n`` votes for ``winner`` over ``loser`` now, two from each of ``n / 2`` addresses."""
    ids = []
    for i in range(n):
        vote = make_vote(winner, loser, "model_a")
        Vote.objects.filter(pk=vote.pk).update(
            ip_hash=f"{tag}{i // 2:061x}"[:64], voter_id=f"{tag}-{i // 2}"
        )
        ids.append(vote.pk)
    return ids


def _rating(snapshot, slug):
    overall = next(c for c in snapshot.payload["categories"] if c["key"] == "overall")
    return next(m for m in overall["results"]["off"]["models"] if m["model"] == slug)["rating"]


def test_a_burst_of_new_addresses_is_held_out_before_the_fit(rated_models, make_vote):
    alpha, _, gamma = rated_models
    _history(make_vote, rated_models)
    honest = services.snapshot_refresh().snapshot
    bots = _burst(make_vote, gamma, alpha, 60)

    defended = services.snapshot_refresh().snapshot
    held = {v.pk for v in Vote.objects.all() if COHORT_BURST in (v.flags or [])}
    assert held and held <= set(bots)  # only the burst's votes, none of the history
    assert defended.payload["excluded"]["by_reason"][COHORT_BURST] == len(held)
    # The burst moved gamma a little at most; without the test it lifts it far.
    lift = _rating(defended, "gamma") - _rating(honest, "gamma")
    Vote.objects.filter(pk__in=held).update(flagged=False, flags=[])
    with override_settings(RATINGS_COHORT_TEST=False):
        undefended = services.snapshot_refresh(force=True).snapshot
    assert _rating(undefended, "gamma") - _rating(honest, "gamma") > lift + 100


def test_the_flag_is_lifted_when_the_rest_of_the_arena_agrees(rated_models, make_vote):
    alpha, beta, gamma = rated_models
    _history(make_vote, rated_models)
    bots = _burst(make_vote, gamma, alpha, 60)
    run = cohorts_quarantine_run()
    assert run.flagged and set(run.flagged) <= set(bots)
    # The arena's own history comes to say the same (its votes on gamma, read again, are all
    # gamma's wins): the burst no longer stands out, and its flag is lifted.
    history = Vote.objects.exclude(pk__in=bots)
    history.filter(battle__model_a=gamma).update(winner="model_a")
    history.filter(battle__model_b=gamma).update(winner="model_b")
    again = cohorts_quarantine_run()
    assert set(again.lifted) == set(run.flagged)
    assert not Vote.objects.filter(pk__in=bots, flagged=True).exists()


def test_staff_clearing_the_flag_is_final(rated_models, make_vote):
    alpha, _, gamma = rated_models
    _history(make_vote, rated_models)
    _burst(make_vote, gamma, alpha, 60)
    flagged = cohorts_quarantine_run().flagged
    votes_flag_clear(vote_ids=flagged, reason=COHORT_BURST)
    assert cohorts_quarantine_run().flagged == []
    assert not Vote.objects.filter(pk__in=flagged, flagged=True).exists()


def test_imported_history_is_trusted(rated_models, make_vote):
    from arena.models import Battle

    alpha, _, gamma = rated_models
    _burst(make_vote, gamma, alpha, 60)
    # The same burst imported by the operator (the demo's history) is never a cohort.
    Battle.objects.update(source=Battle.Source.IMPORT)
    assert cohorts_quarantine_run(dry_run=True).quarantined_ids == []


def test_the_command_prints_each_burst(rated_models, make_vote, capsys):
    alpha, _, gamma = rated_models
    _history(make_vote, rated_models)
    _burst(make_vote, gamma, alpha, 60)
    call_command("flag_cohorts", "--dry-run")
    out = capsys.readouterr().out
    # The burst's pair is gamma over alpha: either side may be the one named.
    assert ("Burst on gamma:" in out or "Burst on alpha:" in out) and "would hold out" in out
    assert not Vote.objects.filter(flagged=True).exists()  # a dry run writes nothing


def test_transparency_says_how_many_votes_are_held_out(rated_models, make_vote, client, settings):
    alpha, _, gamma = rated_models
    _history(make_vote, rated_models)
    _burst(make_vote, gamma, alpha, 60)
    services.snapshot_refresh()
    held = sum(COHORT_BURST in (v.flags or []) for v in Vote.objects.all())
    page = client.get("/transparency").content.decode()
    assert f"Bursts of new visitors: {held} votes are held out." in page
    page = client.get("/transparency", HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert f"Rafales de nouveaux visiteurs : {held} votes sont mis de côté." in page
    settings.RATINGS_COHORT_TEST = False
    page = client.get("/transparency").content.decode()
    assert "Bursts of new visitors: not tested" in page


def test_a_signed_in_visitors_account_is_its_source_and_its_age_its_history(
    rated_models, make_vote, django_user_model
):
    from arena.selectors import votes_for_cohorts

    alpha, _, gamma = rated_models
    old = django_user_model.objects.create_user("old", "old@example.org")
    django_user_model.objects.filter(pk=old.pk).update(
        date_joined=timezone.now() - timedelta(days=40)
    )
    new = django_user_model.objects.create_user("new", "new@example.org")
    votes = [make_vote(gamma, alpha, "model_a") for _ in range(4)]
    for vote, (account, address) in zip(
        votes, [(old, "a" * 64), (old, "b" * 64), (new, "c" * 64), (None, "d" * 64)], strict=True
    ):
        Vote.objects.filter(pk=vote.pk).update(account=account, ip_hash=address)
    rows = {r[0]: r for r in votes_for_cohorts(reason=COHORT_BURST, account_age=timedelta(days=30))}
    sources = [rows[v.pk][5] for v in votes]
    # One account from two addresses is one source; without an account, the address.
    assert sources == [f"account:{old.pk}", f"account:{old.pk}", f"account:{new.pk}", "d" * 64]
    # The old account is established from its first vote; the new one and no account are not.
    assert [rows[v.pk][8] for v in votes] == [True, True, False, False]
