import pytest

from redteam import tasks
from redteam.models import PlayerProfile
from redteam.tests.test_fits import _attempts

pytestmark = pytest.mark.django_db


def test_the_board_shows_each_model_and_only_opted_in_players(client):
    _attempts()
    PlayerProfile.objects.create(player_id="p1", pseudonym="Mallory", on_board=True)
    PlayerProfile.objects.create(player_id="p2", pseudonym="Hidden", on_board=False)
    tasks.refit()
    page = client.get("/redteam/leaderboard/").content.decode()
    assert 'data-model="strong"' in page and 'data-model="weak"' in page
    assert "<svg" in page
    assert "Mallory" in page and "Hidden" not in page


def test_the_board_says_when_nothing_is_computed(client):
    assert b'data-testid="redteam-empty"' in client.get("/redteam/leaderboard/").content


def test_leaving_the_board_hides_the_player_before_any_refit(client):
    _attempts()
    profile = PlayerProfile.objects.create(player_id="p1", pseudonym="Mallory", on_board=True)
    tasks.refit()
    assert "Mallory" in client.get("/redteam/leaderboard/").content.decode()
    profile.on_board = False
    profile.save()
    assert "Mallory" not in client.get("/redteam/leaderboard/").content.decode()


def test_joining_the_board_shows_the_fitted_skill_under_the_new_pseudonym(client):
    _attempts()
    tasks.refit()
    assert (
        'data-testid="redteam-players"' not in client.get("/redteam/leaderboard/").content.decode()
    )
    PlayerProfile.objects.create(player_id="p1", pseudonym="Trudy", on_board=True)
    page = client.get("/redteam/leaderboard/").content.decode()
    assert 'data-testid="redteam-players"' in page and "Trudy" in page


def test_the_board_is_under_red_teaming_in_the_navigation(client, db):
    page = client.get("/redteam/leaderboard/").content.decode()
    nav = page.split("<nav", 1)[1].split("</nav>", 1)[0]
    current = [link for link in nav.split("<a ")[1:] if 'aria-current="page"' in link]
    assert len(current) == 1 and 'href="/redteam/"' in current[0]
    board = client.get("/leaderboard").content.decode().split("<nav", 1)[1].split("</nav>", 1)[0]
    current = [link for link in board.split("<a ")[1:] if 'aria-current="page"' in link]
    assert len(current) == 1 and 'href="/leaderboard"' in current[0]
