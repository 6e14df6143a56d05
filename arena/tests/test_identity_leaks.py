"""Identity leaks (arena.leaks): an answer that names its own model or organisation is marked
when saved (pool battles, live turns, the demo's history), and a vote on its battle is flagged
``identity_leak``: out of ratings and exports by default, still on record."""

import random

import pytest
from django.core.management import call_command

from arena.leaks import answer_names_model, fold, names_in_answer
from arena.live.turns import message_settle
from arena.live.upstream import Answer
from arena.models import ArenaModel, BattleMessage, Vote
from arena.selectors import votes_for_export, votes_for_rating
from arena.services.battles import battle_start_pool
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import ArenaModelFactory, BattleFactory, CompletionFactory, PromptFactory

NAMES = ["gpt-3.5-turbo", "GPT-3.5-Turbo", "OpenAI", "ChatGPT"]


def leaks(answer, user_turns=("Write a haiku about autumn.",)):
    return names_in_answer(answer, names=NAMES, user_turns=user_turns)


def test_folding_ignores_case_and_punctuation():
    assert fold("As an AI language model, developed by OpenAI...") == (
        " as an ai language model developed by openai "
    )
    assert fold("  ... ") == ""


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        ("As an AI language model developed by OpenAI, I cannot.", ["openai"]),
        ("As an AI language model developed by OPENAI, I cannot.", ["openai"]),
        ("I am ChatGPT.", ["chatgpt"]),
        ("This is gpt_3.5 TURBO speaking", ["gpt 3 5 turbo"]),
        ("(GPT-3.5-Turbo)", ["gpt 3 5 turbo"]),
        ("Open-AI trained me", []),  # "open ai" is two words, not the name
        ("I am chatgpt3 and OpenAIish", []),  # inside longer words: no word boundary
        ("The gpt-3.5-turbo-instruct variant", ["gpt 3 5 turbo"]),
        ("Autumn leaves fall", []),
    ],
)
def test_names_match_case_and_punctuation_insensitively_on_word_boundaries(answer, found):
    assert leaks(answer) == found


def test_a_name_the_user_asked_about_is_no_leak_but_other_names_still_are():
    asked = ["What do you think of OpenAI?"]
    assert leaks("OpenAI is a research lab.", asked) == []
    assert leaks("open-ai? OpenAI is a lab; I am ChatGPT.", asked) == ["chatgpt"]
    # Case and punctuation do not matter on the prompt's side either.
    assert leaks("I was made by OpenAI.", ["are you from OPEN_AI or openai."]) == []


def test_names_shorter_than_three_characters_are_ignored():
    assert names_in_answer("I am an AI.", names=["AI", "x"], user_turns=[]) == []


@pytest.mark.django_db
def test_a_models_names_are_its_slug_display_name_organisation_and_aliases():
    model = ArenaModelFactory(
        slug="claude-v1", display_name="Claude-1", organization="Anthropic", aliases=["Claude"]
    )
    assert answer_names_model("I am Claude, an AI assistant.", model=model, user_turns=["Hi"])
    assert answer_names_model("Claude 1 here", model=model, user_turns=["Hi"])
    assert answer_names_model("Built by anthropic.", model=model, user_turns=["Hi"])
    assert not answer_names_model("Who is Claude?", model=model, user_turns=["Tell me of Claude"])
    assert not answer_names_model("Built by OpenAI.", model=model, user_turns=["Hi"])


def vote_on(battle, winner="model_a"):
    terms_accept(voter_id="voter-1")
    return vote_record(
        battle_id=battle.id, session_key="s1", voter_id="voter-1", winner=winner
    ).vote


def pool_pair(answer_a, answer_b, prompt="Tell me about yourself."):
    org_a = ArenaModelFactory(slug="gpt-x", display_name="GPT-X", organization="OpenAI")
    org_b = ArenaModelFactory(slug="other", display_name="Other", organization="Elsewhere")
    question = PromptFactory(turns=[prompt])
    CompletionFactory(prompt=question, model=org_a, turns=[answer_a])
    CompletionFactory(prompt=question, model=org_b, turns=[answer_b])
    return org_a, org_b


@pytest.mark.django_db
def test_a_pool_battle_whose_answer_names_its_model_gets_a_flagged_vote():
    model, _ = pool_pair("As an AI language model developed by OpenAI, I have no self.", "Hi!")
    battle = battle_start_pool(session_key="s1", rng=random.Random(3)).battle
    marked = {
        m.battle.model_a if m.side == "a" else m.battle.model_b: m.names_model
        for m in battle.messages.select_related("battle__model_a", "battle__model_b")
    }
    assert marked[model] is True and sum(marked.values()) == 1
    vote = vote_on(battle)
    assert vote.flagged and vote.flags == ["identity_leak"]
    assert not votes_for_rating().filter(pk=vote.pk).exists()
    assert not votes_for_export().filter(pk=vote.pk).exists()
    assert votes_for_export(include_flagged=True).filter(pk=vote.pk).exists()
    assert Vote.objects.filter(pk=vote.pk).exists()


@pytest.mark.django_db
def test_a_pool_battle_where_the_prompt_asked_about_the_name_is_not_flagged():
    pool_pair("OpenAI is an AI research company.", "A company.", prompt="What is OpenAI?")
    battle = battle_start_pool(session_key="s1", rng=random.Random(3)).battle
    assert not battle.messages.filter(names_model=True).exists()
    vote = vote_on(battle)
    assert not vote.flagged and vote.flags == []
    assert votes_for_rating().filter(pk=vote.pk).exists()


@pytest.mark.django_db
def test_a_pool_answer_naming_another_model_is_no_leak():
    pool_pair("I am not from Elsewhere.", "Elsewhere? No idea.")  # b names a's org, a names b's
    battle = battle_start_pool(session_key="s1", rng=random.Random(3)).battle
    names = {m.side: m.names_model for m in battle.messages.all()}
    other_side = "a" if battle.model_a.slug == "other" else "b"
    assert names[other_side] is True  # "Elsewhere? No idea." names its own organisation
    assert names["b" if other_side == "a" else "a"] is False


@pytest.mark.django_db
def test_a_live_answer_is_checked_when_its_turn_ends():
    model = ArenaModelFactory(slug="llama-x", display_name="Llama X", organization="Meta")
    battle = BattleFactory(model_a=model)
    message = battle.messages.get(side="a")
    message.content, message.status = "", BattleMessage.Status.STREAMING
    message.save()
    answer = Answer(parts=["I'm Llama-X, made by ", "META."], status="done")
    message_settle(message, own_model=model, answer=answer, style=None)
    message.refresh_from_db()
    assert message.names_model is True
    battle.state = battle.State.READY
    battle.save()
    terms_accept(voter_id="voter-1")
    vote = vote_record(
        battle_id=battle.id, session_key="session-1", voter_id="voter-1", winner="model_b"
    ).vote
    assert vote.flags == ["identity_leak"]


@pytest.mark.django_db
def test_a_live_answer_repeating_the_name_the_user_typed_is_not_marked():
    model = ArenaModelFactory(slug="llama-x", display_name="Llama X", organization="Meta")
    battle = BattleFactory(model_a=model)
    message = battle.messages.get(side="a")
    message.user_content = "Summarise Meta's annual report."
    message.status = BattleMessage.Status.STREAMING
    message.save()
    message_settle(
        message, own_model=model, answer=Answer(parts=["Meta grew."], status="done"), style=None
    )
    message.refresh_from_db()
    assert message.names_model is False


@pytest.mark.django_db
def test_the_demos_real_answers_that_name_their_maker_are_marked_and_their_votes_flagged():
    call_command("load_demo")
    assert ArenaModel.objects.get(slug="claude-v1").aliases == ["Claude"]
    marked = BattleMessage.objects.filter(names_model=True).select_related(
        "battle__model_a", "battle__model_b"
    )
    assert marked.exists()
    for message in marked:
        own = message.battle.model_a if message.side == "a" else message.battle.model_b
        assert own.slug in {"claude-v1", "claude-instant-v1"}
        assert "anthropic" in fold(message.content) or "claude" in fold(message.content)
    # e.g. "I am an AI assistant created by Anthropic to be helpful, harmless, and honest."
    assert marked.filter(content__contains="created by Anthropic").exists()
    # Read in Python: SQLite (a laptop's make test) has no JSON containment lookup.
    leaked = [v for v in Vote.objects.all() if "identity_leak" in (v.flags or [])]
    assert {v.battle_id for v in leaked} == set(marked.values_list("battle_id", flat=True))
    assert all(v.flagged for v in leaked)
    # The rest of the history is untouched; "As an AI language model" alone names nobody.
    unmarked = BattleMessage.objects.filter(
        names_model=False, content__contains="As an AI language model"
    )
    assert unmarked.exists()
    assert Vote.objects.filter(flagged=False).count() > 1600


@pytest.mark.django_db
@pytest.mark.parametrize("aliases", ["ChatGPT", [""], ["ok", 3], {"a": "b"}])
def test_aliases_must_be_a_list_of_names(aliases):
    from django.core.exceptions import ValidationError

    model = ArenaModelFactory.build(aliases=aliases)
    with pytest.raises(ValidationError) as exc:
        model.full_clean()
    assert "aliases" in exc.value.message_dict


@pytest.mark.django_db
def test_staff_clear_an_identity_leak_flag_and_the_vote_counts_again():
    from django.contrib.auth import get_user_model
    from django.test import Client

    pool_pair("Made by OpenAI.", "Hi!")
    vote = vote_on(battle_start_pool(session_key="s1", rng=random.Random(3)).battle)
    assert vote.flags == ["identity_leak"]
    staff = get_user_model().objects.create_superuser("staff", "s@example.org", "pw-1234!")
    client = Client()
    client.force_login(staff)
    response = client.post(
        "/admin/arena/vote/",
        {"action": "clear_identity_leak_flag", "_selected_action": [vote.pk]},
    )
    assert response.status_code == 302
    vote.refresh_from_db()
    assert (vote.flagged, vote.flags, vote.flags_cleared) == (False, [], ["identity_leak"])
    assert votes_for_rating().filter(pk=vote.pk).exists()
    assert votes_for_export().filter(pk=vote.pk).exists()
