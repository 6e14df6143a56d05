import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from arena.models import ArenaModel, Completion, completion_turns_hash
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import (
    ArenaModelFactory,
    BattleFactory,
    CompletionFactory,
    ProviderFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client():
    user = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    client = Client()
    client.force_login(user)
    return client


def test_admin_is_staff_only():
    response = Client().get(reverse("admin:arena_arenamodel_changelist"))
    assert response.status_code == 302 and "login" in response["Location"]


def test_staff_adds_a_provider_and_a_model(staff_client, monkeypatch):
    monkeypatch.setenv("VLLM_KEY", "sk-test")
    response = staff_client.post(
        reverse("admin:arena_provider_add"),
        {
            "name": "Local vLLM",
            "base_url": "http://127.0.0.1:8001/v1",
            "api_key_env": "VLLM_KEY",
            "connect_timeout": 5,
            "read_timeout": 60,
            "max_retries": 2,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    provider_id = (
        ArenaModel._meta.get_field("provider").related_model.objects.get(name="Local vLLM").id
    )
    response = staff_client.post(
        reverse("admin:arena_arenamodel_add"),
        {
            "slug": "llama-3-8b",
            "display_name": "Llama 3 8B",
            "organization": "Meta",
            "license": "Llama 3",
            "provider": provider_id,
            "upstream_model_id": "meta-llama/Meta-Llama-3-8B-Instruct",
            "generation_params": '{"temperature": 0.7, "max_tokens": 512}',
            "system_prompt": "",
            "sampling_weight": 1.5,
            "is_active": "on",
            "is_public": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    model = ArenaModel.objects.get(slug="llama-3-8b")
    assert model.is_live and model.generation_params["max_tokens"] == 512


def test_staff_adds_a_pool_variant_with_its_hash_and_not_the_same_text_twice(staff_client):
    existing = CompletionFactory(turns=["Hello there"])
    form = {
        "prompt": existing.prompt_id,
        "model": existing.model_id,
        "turns": '["Hi, another answer"]',
        "source": "pool",
    }
    response = staff_client.post(reverse("admin:arena_completion_add"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    added = Completion.objects.exclude(pk=existing.pk).get()
    assert added.turns_hash == completion_turns_hash(["Hi, another answer"])
    response = staff_client.post(
        reverse("admin:arena_completion_add"), {**form, "turns": '["Hello there"]'}
    )
    assert response.status_code == 200
    assert "already has this answer" in response.content.decode()
    assert Completion.objects.count() == 2


def test_provider_key_field_takes_a_variable_name_not_a_key(staff_client):
    response = staff_client.post(
        reverse("admin:arena_provider_add"),
        {
            "name": "Bad",
            "base_url": "http://127.0.0.1:8001/v1",
            "api_key_env": "sk-live abc/123",
            "connect_timeout": 5,
            "read_timeout": 60,
            "max_retries": 2,
        },
    )
    assert response.status_code == 200
    assert "environment variable name" in response.content.decode()


def test_votes_and_battles_are_read_only_and_searchable(staff_client):
    terms_accept(voter_id="v")
    battle = BattleFactory()
    vote = vote_record(
        battle_id=battle.id, session_key="session-1", voter_id="v", winner="tie"
    ).vote
    listing = staff_client.get(reverse("admin:arena_vote_changelist"), {"q": battle.model_a.slug})
    assert listing.status_code == 200 and str(battle.id) in listing.content.decode()
    assert staff_client.get(reverse("admin:arena_vote_add")).status_code == 403
    assert staff_client.get(reverse("admin:arena_vote_delete", args=[vote.id])).status_code == 403
    assert (
        staff_client.get(reverse("admin:arena_battle_change", args=[battle.id])).status_code == 200
    )
    assert (
        staff_client.get(reverse("admin:arena_battle_changelist"), {"state": "voted"}).status_code
        == 200
    )


def test_model_with_battles_is_retired_not_deleted(staff_client):
    battle = BattleFactory()
    url = reverse("admin:arena_arenamodel_delete", args=[battle.model_a.id])
    assert staff_client.get(url).status_code == 403
    unused = ArenaModelFactory()
    assert (
        staff_client.get(reverse("admin:arena_arenamodel_delete", args=[unused.id])).status_code
        == 200
    )
    staff_client.post(
        reverse("admin:arena_arenamodel_changelist"),
        {
            "action": "retire",
            "_selected_action": [battle.model_a.id],
            "apply": "Retire",
            "reason": "Endpoint shut down",
        },
    )
    battle.model_a.refresh_from_db()
    assert battle.model_a.is_active is False


def test_every_admin_page_renders(staff_client):
    ProviderFactory()
    BattleFactory()
    for name in [
        "provider",
        "arenamodel",
        "prompt",
        "completion",
        "battle",
        "vote",
        "termsacceptance",
    ]:
        assert staff_client.get(reverse(f"admin:arena_{name}_changelist")).status_code == 200
