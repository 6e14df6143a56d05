"""The provider admin's checks: a key variable that is set, and "Test connection" through the
real ``openai`` client against the loopback fake."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import constants
from django.test import Client
from django.urls import reverse

from arena.models import Provider
from arena.tests.factories import ArenaModelFactory, ProviderFactory
from arena.tests.fake_openai import FakeModel
from conftest import free_port

pytestmark = pytest.mark.django_db

PROVIDER_FORM = {
    "name": "Loopback",
    "base_url": "http://127.0.0.1:8001/v1",
    "connect_timeout": 5,
    "read_timeout": 60,
    "max_retries": 2,
}


@pytest.fixture
def staff_client():
    user = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    client = Client()
    client.force_login(user)
    return client


def test_a_key_variable_not_set_on_the_server_is_a_form_error_on_that_field(
    staff_client, monkeypatch
):
    monkeypatch.delenv("ARENA_UNSET_KEY", raising=False)
    response = staff_client.post(
        reverse("admin:arena_provider_add"), {**PROVIDER_FORM, "api_key_env": "ARENA_UNSET_KEY"}
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["api_key_env"]
    assert "ARENA_UNSET_KEY is not set on this server" in errors["api_key_env"][0]
    assert not Provider.objects.exists()


def test_a_key_variable_set_on_the_server_is_saved(staff_client, monkeypatch):
    monkeypatch.setenv("ARENA_SET_KEY", "sk-test")
    response = staff_client.post(
        reverse("admin:arena_provider_add"), {**PROVIDER_FORM, "api_key_env": "ARENA_SET_KEY"}
    )
    assert response.status_code == 302
    assert Provider.objects.get().api_key_env == "ARENA_SET_KEY"


def test_a_provider_without_a_key_variable_is_saved(staff_client):
    response = staff_client.post(
        reverse("admin:arena_provider_add"), {**PROVIDER_FORM, "api_key_env": ""}
    )
    assert response.status_code == 302
    assert Provider.objects.get().api_key_env == ""


def _test_connection(client, provider):
    response = client.post(
        reverse("admin:arena_provider_changelist"),
        {"action": "test_connection", "_selected_action": [provider.pk]},
        follow=True,
    )
    assert response.status_code == 200
    return [(m.level, m.message) for m in response.context["messages"]]


def test_test_connection_lists_the_endpoints_models(staff_client, fake_upstream, monkeypatch):
    monkeypatch.setenv("ARENA_TEST_KEY", "sk-right")
    fake_upstream.api_key = "sk-right"
    fake_upstream.models["upstream-one"] = FakeModel()
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)
    ArenaModelFactory(provider=provider, upstream_model_id="upstream-one")
    ArenaModelFactory(provider=provider, upstream_model_id="upstream-gone")

    [(level, message)] = _test_connection(staff_client, provider)
    assert level == constants.SUCCESS
    assert "1 model(s) listed (upstream-one)" in message
    assert fake_upstream.model_lists == 1
    assert "Not listed, though models here name them: upstream-gone" in message


def test_test_connection_names_a_key_the_endpoint_refuses(staff_client, fake_upstream, monkeypatch):
    monkeypatch.setenv("ARENA_TEST_KEY", "sk-wrong")
    fake_upstream.api_key = "sk-right"
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)

    [(level, message)] = _test_connection(staff_client, provider)
    assert level == constants.ERROR
    assert "refused the API key in ARENA_TEST_KEY: 401" in message
    assert "sk-wrong" not in message


def test_test_connection_says_an_unreachable_endpoint_could_not_be_reached(
    staff_client, monkeypatch
):
    monkeypatch.setenv("ARENA_TEST_KEY", "sk-test")
    provider = ProviderFactory(name="nowhere", base_url=f"http://127.0.0.1:{free_port()}/v1")

    [(level, message)] = _test_connection(staff_client, provider)
    assert level == constants.ERROR
    assert "nowhere" in message and "could not be reached" in message


def test_test_connection_falls_back_to_a_one_token_completion(
    staff_client, fake_upstream, monkeypatch
):
    monkeypatch.setenv("ARENA_TEST_KEY", "sk-test")
    fake_upstream.lists_models = False
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)
    ArenaModelFactory(provider=provider, upstream_model_id="upstream-two")

    [(level, message)] = _test_connection(staff_client, provider)
    assert level == constants.SUCCESS
    assert "one-token completion of upstream-two" in message
    [request] = fake_upstream.requests_for("upstream-two")
    assert request.body["max_tokens"] == 1


def test_test_connection_without_a_model_list_or_a_model_to_try_says_so(
    staff_client, fake_upstream, monkeypatch
):
    monkeypatch.setenv("ARENA_TEST_KEY", "sk-test")
    fake_upstream.lists_models = False
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)

    [(level, message)] = _test_connection(staff_client, provider)
    assert level == constants.ERROR
    assert "no model list (404)" in message


def test_test_connection_with_the_key_variable_unset_calls_nothing(
    staff_client, fake_upstream, monkeypatch
):
    monkeypatch.delenv("ARENA_TEST_KEY", raising=False)
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)

    [(level, message)] = _test_connection(staff_client, provider)
    assert level == constants.ERROR
    assert "ARENA_TEST_KEY is not set on this server" in message
    assert fake_upstream.model_lists == 0 and fake_upstream.requests == []


def test_the_provider_list_says_which_key_variables_are_not_set_here(staff_client, monkeypatch):
    monkeypatch.setenv("ARENA_SET_KEY", "sk-secret-value")
    monkeypatch.delenv("ARENA_UNSET_KEY", raising=False)
    ProviderFactory(name="with-key", api_key_env="ARENA_SET_KEY")
    ProviderFactory(name="missing-key", api_key_env="ARENA_UNSET_KEY")
    ProviderFactory(name="keyless", api_key_env="")
    html = staff_client.get(reverse("admin:arena_provider_changelist")).content.decode()
    assert "ARENA_SET_KEY (set)" in html
    assert "ARENA_UNSET_KEY <strong>(not set here)</strong>" in html
    assert "no key" in html
    assert "sk-secret-value" not in html


def test_the_provider_page_has_a_test_connection_button(staff_client, fake_upstream, monkeypatch):
    monkeypatch.setenv("ARENA_TEST_KEY", "sk-test")
    fake_upstream.models["upstream-one"] = FakeModel()
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)
    page = reverse("admin:arena_provider_change", args=[provider.pk])
    button = reverse("admin:arena_provider_test_connection", args=[provider.pk])
    assert f'action="{button}"' in staff_client.get(page).content.decode()

    response = staff_client.post(button, follow=True)
    assert response.redirect_chain == [(page, 302)]
    [message] = [m.message for m in response.context["messages"]]
    assert "1 model(s) listed (upstream-one)" in message


def test_the_test_connection_button_calls_nothing_on_a_get(staff_client, fake_upstream):
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)
    response = staff_client.get(reverse("admin:arena_provider_test_connection", args=[provider.pk]))
    assert response.status_code == 302
    assert fake_upstream.model_lists == 0


def test_the_test_connection_button_is_staff_only(fake_upstream):
    provider = ProviderFactory(name="fake", base_url=fake_upstream.url)
    response = Client().post(reverse("admin:arena_provider_test_connection", args=[provider.pk]))
    assert response.status_code == 302 and "login" in response["Location"]
    assert fake_upstream.model_lists == 0
