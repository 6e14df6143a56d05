import json

import pytest
from django.core.management import call_command
from django.db.models import Count

from arena.models import ArenaModel, Battle, Completion, Prompt, Vote
from arena.services.demo import DEMO_DATA_DIR

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo():
    call_command("load_demo")


def test_demo_pool_holds_the_80_mt_bench_questions_answered_by_ten_models(demo):
    assert Prompt.objects.filter(source="mt_bench").count() == 80
    pool = Completion.objects.filter(source="pool")
    assert pool.values("prompt", "model").distinct().count() == 800
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


def test_demo_adds_the_judged_texts_that_differ_as_second_variants(demo):
    """gpt-4's and claude-v1's judged generations differ from their published ones on 77 and
    62 questions; the other pool models' are the same texts, and add nothing."""
    pool = Completion.objects.filter(source="pool")
    per_model = {
        row["model__slug"]: row["n"]
        for row in pool.values("model__slug").annotate(n=Count("id")).order_by()
    }
    assert per_model["gpt-4"] == 80 + 77
    assert per_model["claude-v1"] == 80 + 62
    assert {slug: n for slug, n in per_model.items() if n != 80} == {
        "gpt-4": 157,
        "claude-v1": 142,
    }
    # The first variant of each answer is the published one, the judged text comes after it.
    published = {
        json.loads(line)["question_id"]: json.loads(line)["choices"][0]["turns"]
        for line in (DEMO_DATA_DIR / "mt_bench" / "model_answer" / "gpt-4.jsonl").open()
    }
    first, second = pool.filter(model__slug="gpt-4", prompt__external_id="82").order_by("pk")
    assert first.turns == published[82]
    assert second.turns != first.turns
    assert not ArenaModel.objects.filter(slug="vicuna-13b-v1.2", completions__isnull=False)


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
