import json
import uuid

import pytest
from django.test import Client

from arena.models import ArenaModel, Battle, Vote
from arena.tests.factories import pool_of

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json")


@pytest.fixture
def pool():
    return pool_of(n_models=4, n_prompts=3, turns=2)


def identities(models):
    for model in models:
        yield model.slug
        yield model.display_name


def test_battle_payload_before_the_vote_names_no_model(visitor, pool):
    models, _ = pool
    response = post_json(visitor, "/api/battles", {})
    assert response.status_code == 201
    body = response.content.decode()
    for name in identities(models):
        assert name not in body
    payload = response.json()
    assert payload["models"] is None and payload["votable"] is True
    assert len(payload["turns"]) == 2
    detail = visitor.get(f"/api/battles/{payload['id']}").content.decode()
    page = visitor.get("/").content.decode()
    for name in identities(ArenaModel.objects.all()):
        assert name not in detail and name not in page


def test_vote_reveals_both_names_and_records_one_vote(visitor, pool):
    battle = post_json(visitor, "/api/battles", {}).json()
    response = post_json(visitor, f"/api/battles/{battle['id']}/vote", {"winner": "model_b"})
    assert response.status_code == 201
    payload = response.json()
    stored = Battle.objects.get(pk=battle["id"])
    assert payload["models"]["a"]["slug"] == stored.model_a.slug
    assert payload["models"]["b"]["name"] == stored.model_b.display_name
    assert payload["vote"] == {"winner": "model_b"}
    assert Vote.objects.get(battle=stored).winner == "model_b"
    # and the battle's own page now shows them too
    assert visitor.get(f"/api/battles/{battle['id']}").json()["models"] is not None


def test_second_vote_is_409_with_a_message(visitor, pool):
    battle = post_json(visitor, "/api/battles", {}).json()
    post_json(visitor, f"/api/battles/{battle['id']}/vote", {"winner": "tie"})
    response = post_json(visitor, f"/api/battles/{battle['id']}/vote", {"winner": "model_a"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_voted"
    assert response.json()["error"]["message"]
    assert Vote.objects.get().winner == "tie"


def test_vote_from_another_session_is_404_like_an_unknown_battle(visitor, other_visitor, pool):
    battle = post_json(visitor, "/api/battles", {}).json()
    response = post_json(other_visitor, f"/api/battles/{battle['id']}/vote", {"winner": "tie"})
    unknown = post_json(other_visitor, f"/api/battles/{uuid.uuid4()}/vote", {"winner": "tie"})
    assert response.status_code == 404
    assert response.json() == unknown.json()
    assert not Vote.objects.exists()


def test_another_sessions_battle_is_the_same_404_to_read_and_to_vote(visitor, other_visitor, pool):
    battle = post_json(visitor, "/api/battles", {}).json()
    read = other_visitor.get(f"/api/battles/{battle['id']}")
    vote = post_json(other_visitor, f"/api/battles/{battle['id']}/vote", {"winner": "tie"})
    assert (read.status_code, read.json()) == (vote.status_code, vote.json())


def test_another_sessions_battle_is_not_shown(visitor, other_visitor, pool):
    battle = post_json(visitor, "/api/battles", {}).json()
    assert other_visitor.get(f"/api/battles/{battle['id']}").status_code == 404


@pytest.mark.parametrize("battle_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_unknown_battle_is_404_json(visitor, battle_id):
    response = post_json(visitor, f"/api/battles/{battle_id}/vote", {"winner": "tie"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert visitor.get(f"/api/battles/{battle_id}").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("{not json", "body"),
        ("[1, 2]", "body"),
        ({}, "winner"),
        ({"winner": "model_c"}, "winner"),
        ({"winner": None}, "winner"),
    ],
)
def test_malformed_vote_body_is_400_naming_the_field(visitor, pool, body, field):
    battle = post_json(visitor, "/api/battles", {}).json()
    response = post_json(visitor, f"/api/battles/{battle['id']}/vote", body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert Battle.objects.get(pk=battle["id"]).state == Battle.State.READY


def test_vote_before_accepting_terms_is_refused_then_accepted(pool):
    client = Client()
    client.get("/")
    battle = post_json(client, "/api/battles", {}).json()
    refused = post_json(client, f"/api/battles/{battle['id']}/vote", {"winner": "tie"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "terms_required"
    assert post_json(client, "/api/terms", {"accept": False}).status_code == 400
    assert post_json(client, "/api/terms", {"accept": True}).json()["accepted"] is True
    assert (
        post_json(client, f"/api/battles/{battle['id']}/vote", {"winner": "tie"}).status_code == 201
    )


def test_first_visit_page_asks_for_terms_and_later_visits_do_not(pool):
    client = Client()
    assert 'data-terms-accepted="false"' in client.get("/").content.decode()
    post_json(client, "/api/terms", {"accept": True})
    assert 'data-terms-accepted="true"' in client.get("/").content.decode()


def test_page_carries_the_stable_test_hooks(visitor):
    html = visitor.get("/").content.decode()
    for hook in [
        "prompt",
        "response-a",
        "response-b",
        "vote-a",
        "vote-b",
        "vote-tie",
        "vote-bothbad",
        "model-name-a",
        "model-name-b",
        "next-battle",
    ]:
        assert f'data-testid="{hook}"' in html


def test_csrf_is_enforced_on_votes(pool):
    client = Client(enforce_csrf_checks=True)
    client.get("/")
    response = client.post("/api/battles", data="{}", content_type="application/json")
    assert response.status_code == 403
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/api/battles", data="{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert response.status_code == 201


def test_no_pool_gives_a_503_json_error(visitor):
    response = post_json(visitor, "/api/battles", {})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_battle_available"


def test_battle_creation_is_rate_limited(visitor, pool, settings, frozen_clock):
    settings.RATELIMIT_ENABLE = True
    settings.ARENA_RATELIMIT_BATTLES = "3/m"
    statuses = [post_json(visitor, "/api/battles", {}).status_code for _ in range(5)]
    assert statuses[:3] == [201, 201, 201]
    assert statuses[3:] == [429, 429]
