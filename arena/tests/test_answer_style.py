"""Answers keep the style counts they had when saved; a vote sums them instead of recounting."""

import random
from typing import get_type_hints

import pytest

from answer_style import CONV_METADATA_KEYS, ConvMetadata, conv_metadata, style_counts
from arena.live.turns import message_settle
from arena.live.upstream import Answer
from arena.models import BattleMessage
from arena.services.battles import battle_start_pool
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import BattleFactory, CompletionFactory, pool_of

pytestmark = pytest.mark.django_db


def vote(battle):
    terms_accept(voter_id="voter-1")
    return vote_record(
        battle_id=battle.id, session_key="session-1", voter_id="voter-1", winner="tie"
    ).vote


def test_a_pool_battle_saves_each_answer_with_its_counts():
    models, prompts = pool_of(n_models=2, n_prompts=1, turns=2)
    prompts[0].completions.filter(model=models[0]).delete()
    CompletionFactory(prompt=prompts[0], model=models[0], turns=["# One\n- a\n- b", "**x**"])
    battle = battle_start_pool(session_key="s1", rng=random.Random(1)).battle
    messages = list(battle.messages.all())
    assert len(messages) == 4
    for message in messages:
        assert message.style == style_counts(message.content)
    assert sum(m.style["header_count"]["h1"] for m in messages) == 1
    assert sum(m.style["bold_count"]["**"] for m in messages) == 1


def test_a_live_answer_is_counted_when_its_turn_ends():
    battle = BattleFactory()
    message = battle.messages.get(side="a")
    message.content, message.status = "", BattleMessage.Status.STREAMING
    message.save()
    answer = Answer(parts=["## Plan\n", "1. first\n", "2. second"], status="done")
    message_settle(message, own_model=battle.model_a, answer=answer, style=None)
    saved = BattleMessage.objects.get(pk=message.pk)
    assert saved.style == style_counts("## Plan\n1. first\n2. second")
    assert saved.style["header_count"]["h2"] == 1
    assert saved.style["list_count"]["ordered"] == 2


def test_a_vote_sums_the_counts_the_answers_were_saved_with():
    battle = BattleFactory()  # side a's text has one h1 header, side b's none
    stored = {"a": style_counts("## x\n## y"), "b": style_counts("__z__")}
    for side, counts in stored.items():
        battle.messages.filter(side=side).update(style=counts)
    style = vote(battle).style
    assert style == conv_metadata([stored["a"]], [stored["b"]])
    assert style["header_count_a"]["h1"] == 0 and style["header_count_a"]["h2"] == 2
    assert style["bold_count_b"]["__"] == 1


def test_a_vote_counts_an_answer_saved_without_counts():
    battle = BattleFactory(messages={"a": "# A\n- x", "b": "plain"})
    battle.messages.filter(side="b").update(style=style_counts("### c"))
    style = vote(battle).style
    assert style == conv_metadata([style_counts("# A\n- x")], [style_counts("### c")])


def test_conv_metadata_has_the_typed_keys_and_sums_each_side():
    assert set(get_type_hints(ConvMetadata)) == set(CONV_METADATA_KEYS)
    one, two = style_counts("# A\n- x\n**b**"), style_counts("## B\n1. y\n2. z")
    meta = conv_metadata([one, two], [])
    assert list(meta) == list(get_type_hints(ConvMetadata))
    assert meta["sum_assistant_a_tokens"] == one["tokens"] + two["tokens"] > 0
    assert meta["header_count_a"] == {"h1": 1, "h2": 1, "h3": 0, "h4": 0, "h5": 0, "h6": 0}
    assert meta["list_count_a"] == {"ordered": 2, "unordered": 1}
    assert meta["bold_count_a"] == {"**": 1, "__": 0}
    assert meta["sum_assistant_b_tokens"] == 0 and set(meta["list_count_b"].values()) == {0}
