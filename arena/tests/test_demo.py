import pytest
from django.core.management import call_command

from arena.models import ArenaModel, Battle, Completion, Prompt, Vote

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo():
    call_command("load_demo")


def test_demo_pool_holds_the_80_mt_bench_questions_answered_by_ten_models(demo):
    assert Prompt.objects.filter(source="mt_bench").count() == 80
    assert Completion.objects.filter(source="pool").count() == 800
    assert Completion.objects.values("model").distinct().count() == 10
    gpt4 = ArenaModel.objects.get(slug="gpt-4")
    assert (gpt4.organization, gpt4.license) == ("OpenAI", "Proprietary")
    two_turn = Prompt.objects.get(source="mt_bench", external_id="81")
    assert len(two_turn.turns) == 2 and two_turn.category == "writing"


def test_demo_history_holds_the_expert_votes_with_the_texts_they_judged(demo):
    votes = Vote.objects.select_related("battle")
    # 1,751 expert votes, less the few whose conversation texts are not in the source file.
    assert 1700 <= votes.count() <= 1751
    assert set(votes.values_list("winner", flat=True)) <= {"model_a", "model_b", "tie"}
    vote = votes.filter(battle__prompt__external_id="81").first()
    assert vote.battle.source == Battle.Source.IMPORT and vote.battle.state == Battle.State.VOTED
    assert vote.voter_id.startswith("mt_bench:")
    assert vote.style["sum_assistant_a_tokens"] > 0
    two_turn_battles = Battle.objects.filter(source="import", messages__turn=1).distinct().count()
    assert two_turn_battles > 800


def test_load_demo_twice_adds_nothing(demo):
    counts = (
        Prompt.objects.count(),
        Completion.objects.count(),
        Battle.objects.count(),
        Vote.objects.count(),
    )
    call_command("load_demo")
    assert counts == (
        Prompt.objects.count(),
        Completion.objects.count(),
        Battle.objects.count(),
        Vote.objects.count(),
    )


def test_demo_serves_a_pool_battle(demo, visitor):
    response = visitor.post("/api/battles", data="{}", content_type="application/json")
    assert response.status_code == 201
    assert response.json()["turns"][0]["a"]["content"]
