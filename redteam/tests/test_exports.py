import datasets
import pytest
from django.core.management import call_command

from redteam.models import AttemptTurn, Challenge
from redteam.tests.factories import AttemptFactory, ChallengeFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("parquet", [False, True])
def test_the_export_loads_with_datasets_and_never_leaks_the_secret(tmp_path, parquet):
    challenge = ChallengeFactory(
        kind=Challenge.Kind.SECRET, target="hunter2", system_prompt="The password is {secret}."
    )
    attempt = AttemptFactory(challenge=challenge, state="succeeded", evidence={"text": "hunter2"})
    AttemptTurn.objects.create(attempt=attempt, turn=0, user_content="pw?", content="hunter2")
    AttemptFactory(state="surrendered")
    AttemptFactory(state="errored")
    args = ["export_redteam", "--out", str(tmp_path)] + (["--parquet"] if parquet else [])
    call_command(*args)
    assert "hunter2" not in "".join(p.read_bytes().decode("latin-1") for p in tmp_path.iterdir())
    data = datasets.load_dataset(str(tmp_path), split="train")
    assert sorted(data["outcome"]) == ["broken", "held"]
    broken = data[data["outcome"].index("broken")]
    assert broken["messages"][0] == {"role": "system", "content": challenge.rule}
    assert broken["judge"].startswith("judge-") and broken["judge"] != attempt.player_id
