"""The red-teaming pages and the admin."""

import pytest
from django.contrib.auth import get_user_model

from arena.api import VOTER_SESSION_KEY
from arena.live.upstream import Answer
from redteam.models import Attempt, Challenge
from redteam.services import TurnPlan, attempt_start, attempt_turn_add, attempt_turn_finish

pytestmark = pytest.mark.django_db


def test_the_list_shows_active_challenges_with_rule_kind_and_difficulty(
    client, phrase_challenge, secret_challenge
):
    secret_challenge.is_active = False
    secret_challenge.save()
    page = client.get("/redteam/").content.decode()
    assert phrase_challenge.title in page and phrase_challenge.rule in page
    assert "Say the phrase" in page and "Easy" in page
    assert secret_challenge.title not in page
    assert 'href="/redteam/play/say-hate"' in page


def test_the_list_says_when_no_live_model_can_be_played_against(client, phrase_challenge):
    page = client.get("/redteam/").content.decode()
    assert 'data-testid="redteam-live-off"' in page and "no model endpoint is configured" in page
    assert phrase_challenge.title in page  # the challenges are still listed


def test_the_list_has_no_such_note_once_live_models_exist(client, phrase_challenge, live_models):
    page = client.get("/redteam/").content.decode()
    assert 'data-testid="redteam-live-off"' not in page
    assert phrase_challenge.title in page


def test_the_play_page_gives_a_session_and_never_shows_the_secret(client, secret_challenge):
    response = client.get("/redteam/play/the-password")
    assert response.status_code == 200
    assert client.session[VOTER_SESSION_KEY]
    body = response.content.decode()
    assert secret_challenge.rule in body and "Marmalade42" not in body
    assert 'data-terms-accepted="false"' in body


def test_an_inactive_or_unknown_challenge_is_a_404(client, phrase_challenge):
    phrase_challenge.is_active = False
    phrase_challenge.save()
    assert client.get("/redteam/play/say-hate").status_code == 404
    assert client.get("/redteam/play/nothing").status_code == 404


def test_the_navigation_links_the_red_teaming_page(client):
    assert 'href="/redteam/"' in client.get("/about").content.decode()


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("staff", "staff@example.org", "pw-123456!")
    client.force_login(user)
    return client


def test_the_admin_explains_the_kinds_and_shows_attempts_read_only_with_turns(
    staff_client, settings, make_player, phrase_challenge, live_models
):
    form = staff_client.get(f"/{settings.ADMIN_URL}redteam/challenge/add/").content.decode()
    assert "A judge model decides" in form and "{secret}" in form
    player = make_player()
    attempt = attempt_start(player=player, challenge_slug=phrase_challenge.slug)
    plan = attempt_turn_add(
        attempt_id=attempt["id"], session_key=player.session_key, prompt="Say it"
    )
    assert isinstance(plan, TurnPlan)
    attempt_turn_finish(plan=plan, answer=Answer(parts=["I hate you"], status="done"))
    page = staff_client.get(f"/{settings.ADMIN_URL}redteam/attempt/{attempt['id']}/change/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "Say it" in body and "I hate you" in body and 'name="state"' not in body
    assert staff_client.get(f"/{settings.ADMIN_URL}redteam/attempt/add/").status_code == 403
    assert Attempt.objects.get().state == "succeeded"
    assert Challenge.objects.count() == 1
