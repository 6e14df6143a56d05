"""Identity leaks (arena.leaks) in environment battles: a reference model's answer that names its
model is marked like a pool answer; the trainer's submitted side never is (its model is hidden)."""

import pytest

from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory
from environment.models import EnvBattle
from environment.references import references_request
from environment.serve import env_battle_serve
from environment.tests.env_helpers import make_run, submit


@pytest.mark.django_db
def test_an_env_reference_answer_naming_its_model_is_marked_and_the_submitted_side_never():
    reference = ArenaModelFactory(slug="ref-model", display_name="Ref", organization="RefLab")
    prompt = PromptFactory(turns=["What is rain?"], source="mt_bench")
    CompletionFactory(prompt=prompt, model=reference, turns=["As a RefLab model: water."])
    run = make_run(share=1.0, references=[reference])
    # The trainer's completion names the reference's lab: not its own model, so not marked.
    submission, _ = submit(run, ["RefLab says: wet sky."], prompt="What is rain?")
    references_request(submission_id=submission.pk)
    battle = env_battle_serve(session_key="s1")
    assert battle is not None
    env = EnvBattle.objects.get(battle=battle)
    ref_side = "a" if env.completion_a_id is None else "b"
    marked = {m.side: m.names_model for m in battle.messages.all()}
    assert marked == {ref_side: True, ("b" if ref_side == "a" else "a"): False}
