from urllib.parse import quote

import pytest

from arena.models import ApiToken
from arena.tokens import token_create
from redteam.models import AttemptTurn
from redteam.tests.factories import AttemptFactory

pytestmark = pytest.mark.django_db


def test_rewards_are_one_when_the_model_held_and_zero_when_it_broke(client):
    _, raw = token_create(name="trainer", scopes=[ApiToken.Scope.ENV])
    held = AttemptFactory(state="surrendered")
    broke = AttemptFactory(state="succeeded", model=held.model)
    AttemptTurn.objects.create(attempt=held, turn=0, user_content="hi", content="no")
    AttemptFactory(state="open", ended_at=None, model=held.model)
    url = f"/api/env/v1/redteam/rewards?model={held.model.slug}"
    response = client.get(url, headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 200
    rewards = {i["attempt_id"]: i["reward"] for i in response.json()["items"]}
    assert rewards == {str(held.id): 1.0, str(broke.id): 0.0}
    first = next(i for i in response.json()["items"] if i["attempt_id"] == str(held.id))
    assert first["messages"][-1] == {"role": "assistant", "content": "no", "reward": 1.0}


def test_rewards_need_a_token(client):
    response = client.get("/api/env/v1/redteam/rewards?model=x")
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("model=%00", "model"),
        ("model=x&after=%ED%A0%80", "after"),
        ("model=x&after=2020-01-01T00:00:00%2B00:00_not-an-id", "after"),
        ("model=x&after=2020-01-01T00:00:00_00000000-0000-0000-0000-000000000000", "after"),
        ("model=x&after=2020-01-01T00:00:00%2B00:00", "after"),
    ],
)
def test_a_query_no_page_can_have_is_a_400_naming_the_parameter(client, query, field):
    # A NUL reaches PostgreSQL's lookup, a cursor's id its UUID column, a naive time the
    # aware one: each is refused by name before the query runs.
    _, raw = token_create(name="trainer", scopes=[ApiToken.Scope.ENV])
    response = client.get(
        f"/api/env/v1/redteam/rewards?{query}", headers={"Authorization": f"Bearer {raw}"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field


def test_the_next_cursor_reads_the_following_page(client, monkeypatch):
    monkeypatch.setattr("redteam.env_api.PAGE", 1)
    _, raw = token_create(name="trainer", scopes=[ApiToken.Scope.ENV])
    first = AttemptFactory(state="surrendered")
    second = AttemptFactory(state="succeeded", model=first.model)
    url = f"/api/env/v1/redteam/rewards?model={first.model.slug}"
    page = client.get(url, headers={"Authorization": f"Bearer {raw}"}).json()
    following = client.get(
        f"{url}&after={quote(page['next'])}", headers={"Authorization": f"Bearer {raw}"}
    ).json()
    ids = [page["items"][0]["attempt_id"], following["items"][0]["attempt_id"]]
    assert sorted(ids) == sorted([str(first.id), str(second.id)]) and following["next"] is None
