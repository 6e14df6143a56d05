"""``/?mode=live`` on a site with no live model: the page says live battles are off, and tells
staff how to add a model."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from arena.tests.factories import pool_of

pytestmark = pytest.mark.django_db

NOTE = (
    "Live battles are off on this site: no model endpoint is configured. Showing a stored battle."
)


def _page(client, query="?mode=live") -> str:
    response = client.get("/" + query)
    assert response.status_code == 200
    return response.content.decode()


def test_asking_for_live_with_no_live_model_says_live_is_off_and_serves_a_stored_battle(client):
    pool_of()
    html = _page(client)
    assert NOTE in html
    assert 'data-mode="pool"' in html
    # Visitors are not shown the operator's way in.
    assert 'data-testid="live-off-staff"' not in html


def test_staff_are_told_how_to_add_a_live_model(client):
    pool_of()
    staff = get_user_model().objects.create_user("op", password="pw-123456!", is_staff=True)
    client = Client()
    client.force_login(staff)
    html = _page(client)
    assert 'data-testid="live-off-staff"' in html
    assert reverse("admin:arena_provider_add") in html and "docs/models.md" in html


def test_the_page_without_a_mode_asked_for_says_nothing_of_live(client):
    pool_of()
    assert NOTE not in _page(client, "")


def test_with_live_models_the_live_page_has_no_note(client):
    from arena.tests.factories import ArenaModelFactory, ProviderFactory

    provider = ProviderFactory()
    for n in range(2):
        ArenaModelFactory(provider=provider, upstream_model_id=f"up-{n}")
    html = _page(client)
    assert NOTE not in html and 'data-mode="live"' in html
