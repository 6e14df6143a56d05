import factory

from arena.identity import session_hash
from arena.models import (
    ArenaModel,
    Battle,
    BattleMessage,
    Completion,
    Prompt,
    Provider,
    completion_turns_hash,
)


class ProviderFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Provider

    name = factory.Sequence(lambda n: f"provider-{n}")
    base_url = "http://127.0.0.1:9/v1"
    api_key_env = "ARENA_TEST_KEY"


class ArenaModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ArenaModel

    slug = factory.Sequence(lambda n: f"model-{n}")
    display_name = factory.LazyAttribute(lambda o: f"Model {o.slug.title()}")
    organization = "Test Org"
    license = "Apache-2.0"


class PromptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Prompt

    turns = factory.Sequence(lambda n: [f"Question number {n}?"])
    category = "writing"
    source = "test"


class CompletionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Completion

    prompt = factory.SubFactory(PromptFactory)
    model = factory.SubFactory(ArenaModelFactory)
    turns = factory.Sequence(lambda n: [f"Answer {n}, turn {i + 1}" for i in range(2)])
    turns_hash = factory.LazyAttribute(lambda c: completion_turns_hash(c.turns))
    source = Completion.Source.POOL


class BattleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Battle
        skip_postgeneration_save = True

    mode = Battle.Mode.ANONYMOUS
    source = Battle.Source.POOL
    model_a = factory.SubFactory(ArenaModelFactory)
    model_b = factory.SubFactory(ArenaModelFactory)
    prompt = factory.SubFactory(PromptFactory)
    session_hash = factory.LazyAttribute(lambda o: session_hash(o.session_key))
    state = Battle.State.READY

    class Params:
        session_key = "session-1"  # the visitor's session key; the battle stores its hash

    @factory.post_generation
    def messages(self, create, extracted, **kwargs):
        if not create:
            return
        texts = extracted or {"a": "# Title\n\n- one\n- two\n\n**bold**", "b": "Plain answer."}
        for side in ("a", "b"):
            BattleMessage.objects.create(
                battle=self,
                side=side,
                turn=0,
                user_content=self.prompt.turns[0],
                content=texts[side],
            )


def pool_of(n_models: int = 3, n_prompts: int = 2, turns: int = 1, **model_kwargs):
    """Models that all answered the same prompts from the pool."""
    models = [ArenaModelFactory(**model_kwargs) for _ in range(n_models)]
    prompts = [
        PromptFactory(turns=[f"Prompt {p} turn {t + 1}" for t in range(turns)])
        for p in range(n_prompts)
    ]
    for prompt in prompts:
        for model in models:
            CompletionFactory(prompt=prompt, model=model)
    return models, prompts
