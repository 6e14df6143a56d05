"""The moderation hook on live prompts: the local blocklist, OpenAI's moderation endpoint (the
loopback fake through the real openai client), failing closed, the error frame, the record and
the rate-limit cost."""

import hashlib
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore

from arena.errors import ArenaError
from arena.identity import ip_hash, session_hash
from arena.live.turns import battle_start_live, battle_turn_add
from arena.models import Battle, Provider, RefusedPrompt
from arena.services.terms import terms_accept
from arena.tests.fake_openai import FakeModel
from config.asgi import application

SESSION = "session-key-moderation-1"
IP = "203.0.113.9"
MODERATION_MODEL = "moderation-fake"


def start(prompt: str, *, client_ip: str = IP):
    return battle_start_live(session_key=SESSION, prompt=prompt, client_ip=client_ip)


def refused(prompt: str) -> ArenaError:
    with pytest.raises(ArenaError) as caught:
        start(prompt)
    return caught.value


def chat_requests(fake_upstream) -> list:
    return [r for r in fake_upstream.requests if r.model != MODERATION_MODEL]


@pytest.fixture
def moderator(settings, fake_upstream, live_models):
    """OpenAI's moderation endpoint, served by the loopback fake."""
    Provider.objects.create(name="moderator", base_url=fake_upstream.url, max_retries=0)
    settings.ARENA_MODERATION_PROVIDER = "moderator"
    settings.ARENA_MODERATION_MODEL = MODERATION_MODEL
    settings.ARENA_MODERATION_TIMEOUT_SECONDS = 1.0
    fake_upstream.flagged_words = ("forbidden",)
    return fake_upstream


# --- the blocklist ------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_blocklisted_word_is_refused_case_insensitively_and_recorded_by_its_hash(
    settings, live_models
):
    settings.ARENA_MODERATION_BLOCKLIST = "badword, two words"
    error = refused("Please say BadWord now")
    assert error.code == "prompt_refused" and error.field == "prompt"
    assert "BadWord" not in error.message and "badword" not in error.message
    record = RefusedPrompt.objects.get()
    assert record.checker == "blocklist" and record.reason == "badword"
    assert record.prompt_sha256 == hashlib.sha256(b"Please say BadWord now").hexdigest()
    assert record.session_hash == session_hash(SESSION) and record.ip_hash == ip_hash(IP)
    assert record.prompt_chars == len("Please say BadWord now")
    assert not Battle.objects.exists()


@pytest.mark.django_db
def test_the_blocklist_matches_whole_words_and_phrases_across_whitespace(settings, live_models):
    settings.ARENA_MODERATION_BLOCKLIST = "class, two words"
    start("A classic question about subclasses")  # no whole word "class"
    assert refused("two\n  WORDS here").code == "prompt_refused"
    assert RefusedPrompt.objects.get().reason == "two\n  words"


@pytest.mark.django_db
def test_the_blocklist_is_read_from_a_file_with_comments(settings, live_models, tmp_path):
    listing = tmp_path / "blocklist.txt"
    listing.write_text("# one entry a line\nzork   # an invented word\n\n")
    settings.ARENA_MODERATION_BLOCKLIST = str(listing)
    assert refused("tell me about Zork").code == "prompt_refused"
    start("a comment is not an entry: an invented word")
    assert RefusedPrompt.objects.count() == 1


@pytest.mark.django_db
def test_an_empty_blocklist_lets_every_prompt_through(settings, live_models):
    settings.ARENA_MODERATION_BLOCKLIST = ""
    start("anything at all")
    assert Battle.objects.count() == 1 and not RefusedPrompt.objects.exists()


@pytest.mark.django_db
def test_a_follow_up_prompt_is_moderated_too(settings, live_models):
    settings.ARENA_MODERATION_BLOCKLIST = "badword"
    plan = start("a fine first prompt")
    Battle.objects.filter(pk=plan.battle_id).update(state=Battle.State.READY)
    with pytest.raises(ArenaError) as caught:
        battle_turn_add(
            battle_id=plan.battle_id, session_key=SESSION, prompt="now badword", client_ip=IP
        )
    assert caught.value.code == "prompt_refused"
    assert Battle.objects.get(pk=plan.battle_id).prompt.turns == ["a fine first prompt"]


# --- OpenAI's moderation endpoint ---------------------------------------------------------------
@pytest.mark.django_db
def test_a_prompt_the_endpoint_flags_is_refused_with_its_categories(moderator):
    error = refused("something forbidden")
    assert error.code == "prompt_refused"
    record = RefusedPrompt.objects.get()
    assert record.checker == "openai" and record.reason == "harassment"
    asked = [r for r in moderator.requests if r.model == MODERATION_MODEL]
    assert [r.body["input"] for r in asked] == ["something forbidden"]
    assert not Battle.objects.exists()


@pytest.mark.django_db
def test_a_prompt_the_endpoint_passes_starts_the_battle_and_the_blocklist_is_not_used(
    settings, moderator
):
    settings.ARENA_MODERATION_BLOCKLIST = "harmless"  # the endpoint decides, not the list
    start("a harmless question")
    assert Battle.objects.count() == 1 and not RefusedPrompt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("fault", ["http_500", "hang"])
def test_the_endpoint_failing_fails_closed_with_nothing_recorded(moderator, fault):
    moderator.models[MODERATION_MODEL] = FakeModel(fault=fault)
    error = refused("an ordinary question")
    assert error.code == "moderation_unavailable" and error.status == 503
    assert not Battle.objects.exists() and not RefusedPrompt.objects.exists()


@pytest.mark.django_db
def test_a_moderation_provider_that_does_not_exist_fails_closed(settings, live_models):
    settings.ARENA_MODERATION_PROVIDER = "no-such-provider"
    assert refused("hello").code == "moderation_unavailable"
    assert not Battle.objects.exists()


# --- the rate limit -----------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.usefixtures("frozen_clock")
def test_refused_prompts_count_against_the_live_call_rate_limit(settings, live_models):
    settings.RATELIMIT_ENABLE = True
    settings.ARENA_RATELIMIT_LIVE = "2/m"
    settings.ARENA_MODERATION_BLOCKLIST = "badword"
    assert refused("badword one").code == "prompt_refused"
    assert refused("badword two").code == "prompt_refused"
    assert refused("a fine prompt").code == "rate_limited"
    assert not Battle.objects.exists()
    # another address still has its own calls
    start("a fine prompt", client_ip="198.51.100.77")


# --- the websocket frame ------------------------------------------------------------------------
def _new_session() -> str:
    store = SessionStore()
    store["arena_voter_id"] = "voter-moderation"
    store.create()
    terms_accept(voter_id="voter-moderation")
    return store.session_key


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("upstream_clients")
async def test_a_refused_prompt_gets_an_error_frame_and_no_model_is_called(moderator):
    session_key = await database_sync_to_async(_new_session)()
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={session_key}".encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/battle", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    try:
        await comm.send_json_to({"type": "start", "prompt": "a forbidden request"})
        frame = json.loads((await comm.receive_output(10))["text"])
    finally:
        await comm.disconnect()
    assert frame["type"] == "error" and frame["code"] == "prompt_refused"
    assert frame["field"] == "prompt" and "forbidden" not in frame["message"]
    assert chat_requests(moderator) == []
    assert await database_sync_to_async(RefusedPrompt.objects.count)() == 1
    assert not await database_sync_to_async(Battle.objects.exists)()


@pytest.mark.django_db
def test_staff_see_refused_prompts_in_the_admin_by_hash_never_by_text(
    settings, live_models, admin_client
):
    settings.ARENA_MODERATION_BLOCKLIST = "badword"
    refused("a very private badword prompt")
    page = admin_client.get("/admin/arena/refusedprompt/").content.decode()
    assert RefusedPrompt.objects.get().prompt_sha256 in page
    assert "very private" not in page
