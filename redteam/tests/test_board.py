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


def test_the_board_names_models_and_challenges_and_says_how_it_is_made(
    client, settings, django_assert_max_num_queries
):
    from arena.models import ArenaModel
    from redteam.models import Attempt, Challenge
    from redteam.tests.factories import AttemptFactory

    settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY = 4
    settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY = 9
    _attempts(120)
    ArenaModel.objects.filter(slug="strong").update(display_name="Strong Model 2")
    Challenge.objects.filter(slug="hard").update(title="The hard one")
    strong = ArenaModel.objects.get(slug="strong")
    # Three attempts the fit leaves out: one left open, one errored, one a bot's.
    AttemptFactory(model=strong, state=Attempt.State.OPEN, ended_at=None)
    AttemptFactory(model=strong, state=Attempt.State.ERRORED)
    AttemptFactory(
        model=strong, state=Attempt.State.SUCCEEDED, flagged=True, flags=["bot_user_agent"]
    )
    tasks.refit()
    page = client.get("/redteam/leaderboard/").content.decode()
    models = page.split('data-testid="redteam-models"', 1)[1].split("</table>", 1)[0]
    assert "Strong Model 2" in models and 'data-model="strong"' in models
    assert "The hard one" in page.split('data-testid="redteam-challenges"', 1)[1]

    how = page.split('data-testid="redteam-transparency"', 1)[1].split("</section>", 1)[0]
    assert "at most 4 attempts a day against one model" in how
    assert "one network address together may start at most 9 attempts a day" in how
    played = {
        row.split('data-model="', 1)[1].split('"', 1)[0]: [
            int(cell.split("<", 1)[0]) for cell in row.split("<td>")[2:]
        ]
        for row in how.split("<tr ")[1:]
    }
    counted = Attempt.objects.filter(model=strong, flagged=False)
    broken = counted.filter(state=Attempt.State.SUCCEEDED).count()
    held = counted.filter(state__in=[Attempt.State.SURRENDERED, Attempt.State.EXPIRED]).count()
    # Attempts, broken, held, not counted.
    assert played["Strong Model 2"] == [broken + held + 3, broken, held, 3]
    left_out = how.split('data-testid="redteam-left-out"', 1)[1]
    assert "1 attempt never ended" in left_out and "1 attempt ended on an error" in left_out
    assert "1 attempt flagged:" in left_out and "a bot&#x27;s browser (1)" in left_out
    # Counted on each visit, in a fixed few queries whatever the number of attempts.
    with django_assert_max_num_queries(8):
        client.get("/redteam/leaderboard/")


def test_without_attempts_the_board_says_none_was_played(client, settings):
    settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_DAY = 0
    settings.ARENA_REDTEAM_ATTEMPTS_PER_MODEL_IP_DAY = 0
    page = client.get("/redteam/leaderboard/").content.decode()
    how = page.split('data-testid="redteam-transparency"', 1)[1].split("</section>", 1)[0]
    assert "No attempt has been played yet." in how
    assert "no daily cap" in how and "network address" not in how
