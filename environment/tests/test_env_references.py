"""Reference answers to a submission's prompt (environment.references): copied from the pool, or
generated once through the real openai client from the loopback fake provider."""

from unittest import mock

import pytest

from arena.models import ArenaModel, Completion, Provider
from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory
from arena.tests.fake_openai import FakeModel
from environment.references import ReferenceFailed, reference_answer_generate, references_request
from environment.tasks import env_reference_answer
from environment.tests.env_helpers import eager_tasks, make_run, submit

__all__ = ["eager_tasks"]  # a fixture, used by name

pytestmark = pytest.mark.django_db

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another one?"},
]


@pytest.fixture
def live_reference(fake_upstream) -> ArenaModel:
    provider = Provider.objects.create(
        name="loopback-ref", base_url=fake_upstream.url, read_timeout=5.0, max_retries=0
    )
    fake_upstream.models["upstream-ref"] = FakeModel(tokens=["Green", ", ", "surely."])
    return ArenaModel.objects.create(
        slug="ref-live",
        display_name="Reference Live",
        provider=provider,
        upstream_model_id="upstream-ref",
        system_prompt="Answer well.",
        generation_params={"temperature": 0.3, "max_tokens": 64},
    )


def reference_of(submission, model):
    return Completion.objects.filter(
        prompt=submission.prompt, model=model, source=Completion.Source.REFERENCE
    ).first()


def test_a_single_turn_prompt_in_the_pool_takes_the_pool_answer_without_a_call(fake_upstream):
    provider = Provider.objects.create(name="p", base_url=fake_upstream.url)
    model = ArenaModelFactory(provider=provider, upstream_model_id="upstream-x")
    pool_prompt = PromptFactory(turns=["What is rain?"], source="mt_bench")
    CompletionFactory(prompt=pool_prompt, model=model, turns=["Water from clouds.", "More."])
    run = make_run(references=[model])
    submission, _ = submit(run, ["wet"], prompt="What is rain?")
    references_request(submission_id=submission.pk)
    answer = reference_of(submission, model)
    assert answer is not None and answer.turns == ["Water from clouds."]
    assert fake_upstream.requests == []
    references_request(submission_id=submission.pk)  # again: nothing new
    assert Completion.objects.filter(source=Completion.Source.REFERENCE).count() == 1


def test_the_first_answer_of_a_longer_pool_conversation_answers_its_first_message():
    model = ArenaModelFactory()
    two_turns = PromptFactory(turns=["Write a poem.", "Now shorter."], source="mt_bench")
    CompletionFactory(prompt=two_turns, model=model, turns=["A long poem.", "A short one."])
    run = make_run(references=[model])
    submission, _ = submit(run, ["mine"], prompt="Write a poem.")
    references_request(submission_id=submission.pk)
    assert reference_of(submission, model).turns == ["A long poem."]
    # A one-turn pool prompt with the same message is preferred.
    one_turn = PromptFactory(turns=["Write a poem."], source="other_pool")
    CompletionFactory(prompt=one_turn, model=model, turns=["A poem on its own."])
    other, _ = submit(run, ["mine again"], prompt="Write a poem.")
    references_request(submission_id=other.pk)
    assert reference_of(other, model).turns == ["A poem on its own."]


def test_a_conversation_not_in_the_pool_is_answered_once_by_the_provider(
    live_reference, fake_upstream, eager_tasks
):
    run = make_run(references=[live_reference])
    submission, _ = submit(run, ["Red."], prompt=CONVERSATION)
    references_request(submission_id=submission.pk)
    answer = reference_of(submission, live_reference)
    assert answer is not None and answer.turns == ["Green, surely."]
    [request] = fake_upstream.requests
    assert request.model == "upstream-ref"
    assert request.messages == [{"role": "system", "content": "Answer well."}, *CONVERSATION]
    assert not request.body.get("stream")
    assert request.body["temperature"] == 0.3 and request.body["max_tokens"] == 64
    # The task is idempotent: a rerun keeps the stored answer and calls nobody.
    assert env_reference_answer.apply(
        kwargs={"submission_id": str(submission.pk), "model_id": live_reference.pk}
    ).get()
    assert len(fake_upstream.requests) == 1
    assert Completion.objects.filter(source=Completion.Source.REFERENCE).count() == 1


def test_a_failing_provider_stores_nothing_and_the_task_retries_then_logs(
    live_reference, fake_upstream, eager_tasks, caplog
):
    fake_upstream.models["upstream-ref"] = FakeModel(fault="http_500")
    run = make_run(references=[live_reference])
    submission, _ = submit(run, ["Red."], prompt=CONVERSATION)
    with pytest.raises(ReferenceFailed, match="InternalServerError"):
        reference_answer_generate(submission_id=submission.pk, model_id=live_reference.pk)
    with caplog.at_level("ERROR", logger="arena.tasks"):
        result = env_reference_answer.apply(
            kwargs={"submission_id": str(submission.pk), "model_id": live_reference.pk}
        ).get()
    assert result is False and "no reference answer" in caplog.text
    assert reference_of(submission, live_reference) is None
    # With a worker (not eager), a failure is retried with back-off.
    with (
        mock.patch.object(
            env_reference_answer, "retry", side_effect=RuntimeError("retry")
        ) as retry,
        pytest.raises(RuntimeError),
    ):
        env_reference_answer.run(submission_id=str(submission.pk), model_id=live_reference.pk)
    assert retry.call_args.kwargs["countdown"] == 30


def test_an_empty_answer_is_a_failure(live_reference, fake_upstream):
    fake_upstream.models["upstream-ref"] = FakeModel(tokens=[])
    run = make_run(references=[live_reference])
    submission, _ = submit(run, ["Red."], prompt=CONVERSATION)
    with pytest.raises(ReferenceFailed, match="empty"):
        reference_answer_generate(submission_id=submission.pk, model_id=live_reference.pk)


def test_a_missing_key_is_a_failure_without_a_call(live_reference, fake_upstream, monkeypatch):
    Provider.objects.filter(pk=live_reference.provider_id).update(api_key_env="ARENA_REF_KEY")
    monkeypatch.delenv("ARENA_REF_KEY", raising=False)
    run = make_run(references=[live_reference])
    submission, _ = submit(run, ["Red."], prompt=CONVERSATION)
    with pytest.raises(ReferenceFailed, match="ARENA_REF_KEY"):
        reference_answer_generate(submission_id=submission.pk, model_id=live_reference.pk)
    assert fake_upstream.requests == []
