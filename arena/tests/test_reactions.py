"""Reactions on answers: who may react, what a reaction may say, and how it changes."""

import pytest

from arena.errors import ArenaError
from arena.models import Battle, Reaction, ReactionTag
from arena.selectors import model_reactions, reaction_tags_active
from arena.services.reactions import reaction_set
from arena.services.terms import terms_accept
from arena.services.votes import vote_record
from arena.tests.factories import BattleFactory

pytestmark = pytest.mark.django_db


def react(battle, **overrides):
    kwargs = {"battle_id": battle.id, "session_key": "session-1", "side": "a", "liked": True}
    kwargs.update(overrides)
    return reaction_set(**kwargs)


def problem(battle, **overrides) -> ArenaError:
    with pytest.raises(ArenaError) as caught:
        react(battle, **overrides)
    return caught.value


def test_the_default_tags_are_comparias_reasons_split_by_polarity():
    up = set(ReactionTag.objects.filter(polarity="up").values_list("slug", flat=True))
    down = set(ReactionTag.objects.filter(polarity="down").values_list("slug", flat=True))
    assert up == {"useful", "complete", "creative", "clear-formatting"}
    assert down == {"incorrect", "superficial", "instructions-not-followed"}


def test_a_reaction_is_stored_with_its_tags_and_changed_in_place():
    battle = BattleFactory()
    react(battle, tags=["useful", "complete", "useful"])
    reaction = Reaction.objects.get()
    assert (reaction.side, reaction.liked, reaction.tags) == ("a", True, ["useful", "complete"])
    assert reaction.after_reveal is False

    react(battle, liked=False, tags=["incorrect"])
    reaction = Reaction.objects.get()
    assert (reaction.liked, reaction.tags) == (False, ["incorrect"])

    assert react(battle, liked=None) is None
    assert not Reaction.objects.exists()


def test_each_side_has_its_own_reaction():
    battle = BattleFactory()
    react(battle, side="a", liked=True)
    react(battle, side="b", liked=False)
    assert dict(Reaction.objects.values_list("side", "liked")) == {"a": True, "b": False}


def test_a_reaction_after_the_vote_is_marked_as_given_with_the_names_known():
    battle = BattleFactory()
    terms_accept(voter_id="voter-1")
    vote_record(battle_id=battle.id, session_key="session-1", voter_id="voter-1", winner="tie")
    react(battle)
    assert Reaction.objects.get().after_reveal is True


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"side": "c"}, "side"),
        ({"liked": "yes"}, "liked"),
        ({"tags": "useful"}, "tags"),
        ({"tags": ["useful", "no-such-tag"]}, "tags.1"),
        ({"tags": ["incorrect"]}, "tags.0"),  # a thumbs-down reason on a thumbs up
        ({"tags": [{"slug": "useful"}]}, "tags.0"),
        ({"tags": ["useful"] * 9}, "tags"),
    ],
)
def test_a_bad_reaction_is_a_400_naming_the_field_and_stores_nothing(overrides, field):
    battle = BattleFactory()
    error = problem(battle, **overrides)
    assert (error.status, error.field) == (400, field)
    assert not Reaction.objects.exists()


def test_a_retired_tag_is_refused():
    ReactionTag.objects.filter(slug="creative").update(is_active=False)
    error = problem(BattleFactory(), tags=["creative"])
    assert error.field == "tags.0"


def test_only_the_battles_session_may_react_and_only_to_complete_answers():
    battle = BattleFactory()
    assert problem(battle, session_key="session-2").status == 404
    battle.state = Battle.State.STREAMING
    battle.save(update_fields=["state"])
    error = problem(battle)
    assert (error.status, error.field) == (409, "battle_id")
    assert not Reaction.objects.exists()


def test_staff_add_a_tag_in_the_admin_and_visitors_may_then_give_it(admin_client):
    response = admin_client.post(
        "/admin/arena/reactiontag/add/",
        {
            "label": "Well sourced",
            "slug": "well-sourced",
            "polarity": "up",
            "position": 9,
            "is_active": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    battle = BattleFactory()
    react(battle, tags=["well-sourced"])
    assert Reaction.objects.get().tags == ["well-sourced"]


def test_staff_cannot_delete_a_tag_reactions_carry(admin_client):
    tag = ReactionTag.objects.get(slug="useful")
    response = admin_client.post(f"/admin/arena/reactiontag/{tag.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert ReactionTag.objects.filter(slug="useful").exists()


def test_a_models_reactions_count_its_side_only_and_leave_out_those_after_the_reveal():
    battle = BattleFactory()
    other = BattleFactory(model_b=battle.model_a)  # the same model on side B
    react(battle, side="a", liked=True, tags=["useful", "complete"])
    react(battle, side="b", liked=False, tags=["incorrect"])  # the opponent's answer
    react(other, side="b", liked=True, tags=["useful"])
    react(other, side="a", liked=False)
    Reaction.objects.create(
        battle=BattleFactory(model_a=battle.model_a),
        side="a",
        liked=False,
        tags=["superficial"],
        after_reveal=True,
    )

    summary = model_reactions(slug=battle.model_a.slug)
    assert (summary.up, summary.down) == (2, 0)
    assert summary.reasons_up == [("Useful", 2), ("Complete", 1)]
    assert summary.reasons_down == []
    opponent = model_reactions(slug=battle.model_b.slug)
    assert (opponent.up, opponent.down, opponent.reasons_down) == (0, 1, [("Incorrect", 1)])


def test_the_offered_tags_follow_the_staffs_order_and_leave_out_retired_ones():
    ReactionTag.objects.filter(slug="useful").update(position=50)
    ReactionTag.objects.filter(slug="creative").update(is_active=False)
    offered = reaction_tags_active()
    assert [t["slug"] for t in offered["up"]] == ["complete", "clear-formatting", "useful"]
    assert offered["down"][0] == {"slug": "incorrect", "label": "Incorrect"}
