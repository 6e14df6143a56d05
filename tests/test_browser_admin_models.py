"""In Chromium at 1366x900, a common laptop screen: the admin's model list fits, every column
(the editable weight, Is active and Is public included) in view without scrolling sideways; and
a provider's "Test connection" button answers."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from arena.models import Battle, BattleMessage
from arena.tests.factories import ArenaModelFactory, BattleFactory, ProviderFactory
from tests.helpers import csp_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_model_list_fits_a_1366_px_screen(asgi_server, browser, settings):
    # Long names of every kind, as real catalogues have them.
    provider = ProviderFactory(
        name="Together AI (serverless, us-east)",
        breaker_failures=4,
        breaker_open_until=timezone.now() + timedelta(minutes=3),
    )
    models = [
        ArenaModelFactory(
            slug=f"meta-llama-3.1-405b-instruct-turbo-{n}",
            display_name=f"Llama 3.1 405B Instruct Turbo ({n})",
            organization="Meta Platforms, Inc.",
            provider=provider,
            upstream_model_id=f"meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo-{n}",
        )
        for n in range(4)
    ]
    failed = BattleFactory(source=Battle.Source.LIVE, model_a=models[0], model_b=models[1])
    BattleMessage.objects.filter(battle=failed, side="a").update(
        status=BattleMessage.Status.ERROR,
        error="Error code: 503 - {'error': {'message': 'The server is overloaded, try later'}}",
    )
    get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")

    context = browser.new_context(viewport={"width": 1366, "height": 900})
    violations = csp_violations(context)
    try:
        page = context.new_page()
        page.goto(asgi_server.url + "/" + settings.ADMIN_URL)
        page.fill("#id_username", "staff")
        page.fill("#id_password", "pw-123456!")
        page.click("input[type=submit]")
        page.wait_for_url("**/" + settings.ADMIN_URL)
        page.goto(asgi_server.url + reverse("admin:arena_arenamodel_changelist"))
        page.locator("#result_list").wait_for()

        overflow = page.evaluate(
            """() => {
                const results = document.querySelector('#changelist .results');
                const table = document.querySelector('#result_list');
                const root = document.documentElement;
                return {
                    results: results.scrollWidth - results.clientWidth,
                    page: root.scrollWidth - root.clientWidth,
                    tableRight: table.getBoundingClientRect().right - root.clientWidth,
                };
            }"""
        )
        assert overflow["results"] <= 0, overflow
        assert overflow["page"] <= 0, overflow
        assert overflow["tableRight"] <= 0, overflow
        width = page.evaluate("() => document.documentElement.clientWidth")
        for column in (
            "model_name",
            "sampling_weight",
            "is_active",
            "is_public",
            "health",
            "leaderboard",
        ):
            header = page.locator(f"#result_list th.column-{column}")
            box = header.bounding_box()
            assert box is not None and box["x"] + box["width"] <= width, column

        # The provider's page: its "Test connection" button reports in an admin message (here
        # without a call: the factory's key variable is not set on this server).
        page.goto(asgi_server.url + reverse("admin:arena_provider_change", args=[provider.pk]))
        page.get_by_test_id("test-connection").click()
        page.locator(".messagelist .error").wait_for()
        assert (
            "ARENA_TEST_KEY is not set on this server" in page.locator(".messagelist").inner_text()
        )
    finally:
        context.close()
    assert not violations, "\n".join(violations)
