"""``manage.py pool_generate``: more pool variants asked of a model's provider, through the real
openai client from the loopback fake provider."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from arena.models import ArenaModel, Completion, Provider
from arena.tests.factories import pool_of
from arena.tests.fake_openai import FakeModel

pytestmark = pytest.mark.django_db


@pytest.fixture
def generator(fake_upstream) -> ArenaModel:
    provider = Provider.objects.create(
        name="loopback-gen", base_url=fake_upstream.url, read_timeout=5.0, max_retries=0
    )
    fake_upstream.models["upstream-gen"] = FakeModel(tokens=["Once ", "upon"], numbered=True)
    return ArenaModel.objects.create(
        slug="gen-model",
        display_name="Gen Model",
        provider=provider,
        upstream_model_id="upstream-gen",
        generation_params={"temperature": 0},
    )


def generate(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("pool_generate", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def answers_of(model: ArenaModel, prompt) -> list[list[str]]:
    return [
        c.turns
        for c in Completion.objects.filter(prompt=prompt, model=model, source="pool").order_by("pk")
    ]


def test_each_pool_prompt_gets_the_asked_variants_turn_by_turn(generator, fake_upstream):
    _, prompts = pool_of(n_models=2, n_prompts=2, turns=2)
    out, _ = generate("--model", "gen-model", "--variants", "2")
    assert "2 of 2 prompts answered, 4 new variants, 0 duplicates" in out
    assert answers_of(generator, prompts[0]) == [
        ["Once upon (1)", "Once upon (2)"],
        ["Once upon (3)", "Once upon (4)"],
    ]
    assert len(answers_of(generator, prompts[1])) == 2
    # The second turn is asked after the model's own first answer.
    second = fake_upstream.requests[1].messages
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == "Once upon (1)"
    assert second[2]["content"] == prompts[0].turns[1]


def test_the_requests_sample_at_a_temperature_above_zero(generator, fake_upstream):
    pool_of(n_models=2, n_prompts=1)
    generate("--model", "gen-model")
    assert {r.body["temperature"] for r in fake_upstream.requests} == {1.0}
    generate("--model", "gen-model", "--temperature", "0.7")
    assert fake_upstream.requests[-1].body["temperature"] == 0.7
    assert "stream" not in fake_upstream.requests[-1].body


def test_a_failing_prompt_is_reported_and_stores_nothing_the_others_are_kept(
    generator, fake_upstream
):
    _, prompts = pool_of(n_models=2, n_prompts=2, turns=2)
    # The first variant of prompt 1 is answered in full, the second fails on its second turn.
    fake_upstream.models["upstream-gen"].fail_on = "Prompt 1 turn 2"
    with pytest.raises(CommandError, match="1 of 2 prompts answered.*1 prompts failed"):
        generate("--model", "gen-model", "--variants", "2")
    assert len(answers_of(generator, prompts[0])) == 2
    assert answers_of(generator, prompts[1]) == []


def test_the_failure_names_its_prompt_on_stderr(generator, fake_upstream):
    _, prompts = pool_of(n_models=2, n_prompts=2)
    fake_upstream.models["upstream-gen"].fail_on = "Prompt 0 turn 1"
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("pool_generate", "--model", "gen-model", stdout=StringIO(), stderr=err)
    assert err.getvalue().startswith(f"prompt {prompts[0].pk}: InternalServerError")


def test_a_text_the_model_already_has_is_a_duplicate_not_a_second_variant(generator, fake_upstream):
    _, prompts = pool_of(n_models=2, n_prompts=1)
    fake_upstream.models["upstream-gen"].numbered = False
    out, _ = generate("--model", "gen-model", "--variants", "2")
    assert "1 new variants, 1 duplicates" in out
    assert answers_of(generator, prompts[0]) == [["Once upon"]]


def test_only_the_named_prompts_are_asked(generator, fake_upstream):
    _, prompts = pool_of(n_models=2, n_prompts=3)
    generate("--model", "gen-model", "--prompts", str(prompts[2].pk))
    assert [len(answers_of(generator, p)) for p in prompts] == [0, 0, 1]
    with pytest.raises(CommandError, match="Not pool prompts: 999999"):
        generate("--model", "gen-model", "--prompts", "999999")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "gen-model", "--temperature", "0"], "must be above 0"),
        (["--model", "gen-model", "--variants", "0"], "between 1 and"),
        (["--model", "no-such-model"], "No model 'no-such-model'"),
    ],
)
def test_bad_arguments_are_refused_before_any_call(generator, fake_upstream, args, expected):
    pool_of(n_models=2, n_prompts=1)
    with pytest.raises(CommandError, match=expected):
        generate(*args)
    assert fake_upstream.requests == []


def test_a_model_without_a_provider_is_refused(fake_upstream):
    models, _ = pool_of(n_models=2, n_prompts=1)
    with pytest.raises(CommandError, match="has no provider"):
        generate("--model", models[0].slug)
