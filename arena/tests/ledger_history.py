"""A small arena for the fairness ledger's tests, dated back from a given ``now``: two providers
and a model known only by its endpoint, a private variant published later, a variant tested
privately and withdrawn, a model battling before its release date, a retired model, unequal
sampling, named, flagged and unvoted battles that the export leaves out, and an environment
battle that no count sees.

Battles (days before ``now``; "pre" marks a side counted before release):

==  ====  ==============================  ===============================================
 #  days  sides                           notes
==  ====  ==============================  ===============================================
 1    29  acme-one v acme-secret (pre)    acme-secret private until 20 days ago
 2    27  acme-secret (pre) v bolt-main   bolt-main released 25 days ago: pre too
 3    15  acme-secret v acme-one
 4    28  acme-withdrawn (pre) v acme-one never public; retired 10 days ago
 5    26  acme-one v acme-withdrawn (pre) flagged vote: not exported
 6    18  bolt-main v acme-one            named: not exported
 7    60  bolt-old v acme-one             outside the 30 days; bolt-old retired 45 days ago
 8    10  acme-one v local-model          local-model: no organisation, endpoint "Local vLLM"
 9     9  acme-one v bolt-main            no vote
10     5  acme-one v local-model          environment battle: never counted
==  ====  ==============================  ===============================================
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from arena.models import ArenaModel, Battle
from arena.services.models import model_retire, model_visibility_set
from arena.tests.factories import ArenaModelFactory, BattleFactory, ProviderFactory


def ledger_history(make_vote: Any, now: datetime) -> dict[str, ArenaModel]:
    def ago(days: float) -> datetime:
        return now - timedelta(days=days)

    acme = {
        slug: ArenaModelFactory(slug=slug, display_name=name, organization="Acme AI", **extra)
        for slug, name, extra in (
            ("acme-one", "Acme One", {}),
            ("acme-secret", "Acme Secret", {"is_public": False}),
            ("acme-withdrawn", "Acme Withdrawn", {"is_public": False}),
        )
    }
    bolt_main = ArenaModelFactory(
        slug="bolt-main",
        display_name="Bolt Main",
        organization="Bolt Labs",
        release_date=ago(25).date(),
    )
    bolt_old = ArenaModelFactory(slug="bolt-old", display_name="Bolt Old", organization="Bolt Labs")
    local = ArenaModelFactory(
        slug="local-model",
        display_name="Local Model",
        organization="",
        provider=ProviderFactory(name="Local vLLM"),
        upstream_model_id="local",
    )
    one, secret, withdrawn = acme["acme-one"], acme["acme-secret"], acme["acme-withdrawn"]

    def battle(a: ArenaModel, b: ArenaModel, days: float, **kwargs: Any) -> Battle:
        vote = make_vote(a, b, "model_a", **kwargs)
        Battle.objects.filter(pk=vote.battle_id).update(created_at=ago(days))
        return vote.battle

    battle(one, secret, 29)
    battle(secret, bolt_main, 27)
    battle(secret, one, 15)
    battle(withdrawn, one, 28)
    battle(one, withdrawn, 26, flagged=True)
    battle(bolt_main, one, 18, mode="named")
    battle(bolt_old, one, 60)
    battle(one, local, 10)
    unvoted = BattleFactory(model_a=one, model_b=bolt_main)
    Battle.objects.filter(pk=unvoted.pk).update(created_at=ago(9))
    env = battle(one, local, 5)
    Battle.objects.filter(pk=env.pk).update(source=Battle.Source.ENV)

    model_visibility_set(model=secret, public=True, reason="Released as Acme Two", at=ago(20))
    model_retire(model=withdrawn, reason="Variant withdrawn after private testing", at=ago(10))
    model_retire(model=bolt_old, reason="Endpoint shut down", by="staff", at=ago(45))
    return {
        "acme-one": one,
        "acme-secret": secret,
        "acme-withdrawn": withdrawn,
        "bolt-main": bolt_main,
        "bolt-old": bolt_old,
        "local-model": local,
    }
