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
