"""The interface in the visitor's language: the language cookie, else Accept-Language, chooses
English or French for the pages, the scripts' catalogue, the API's error messages and the
battle socket's; codes and fields stay English identifiers."""

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from django.utils import translation

from arena.errors import ArenaError, ErrorCode, not_found, still_streaming
from arena.live.websocket import scope_language
from config.asgi import application
from config.settings import base

pytestmark = pytest.mark.django_db

FRENCH = {"HTTP_ACCEPT_LANGUAGE": "fr-FR,fr;q=0.9,en;q=0.5"}
ROOT = Path(__file__).resolve().parent.parent


def base_settings_with(languages: str) -> subprocess.CompletedProcess[str]:
    """config.settings.base read in a fresh interpreter with ARENA_LANGUAGES set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["ARENA_LANGUAGES"] = languages
    code = "from config.settings import base as b; print(b.LANGUAGE_CODE, b.LANGUAGES)"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def html_lang(response) -> str:
    match = re.search(r'<html lang="([^"]+)"', response.content.decode())
    assert match, response.content[:200]
    return match.group(1)


def french_client() -> Client:
    client = Client()
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "fr"
    return client


def vote_on_unknown_battle(client: Client):
    return client.post(
        f"/api/battles/{uuid.uuid4()}/vote",
        data=json.dumps({"winner": "model_a"}),
        content_type="application/json",
    )


def test_the_languages_are_english_and_french_with_english_the_default():
    assert [code for code, _ in settings.LANGUAGES] == ["en", "fr"]
    assert settings.LANGUAGE_CODE == "en"
    middleware = settings.MIDDLEWARE
    locale = middleware.index("django.middleware.locale.LocaleMiddleware")
    assert locale < middleware.index("arena.api.ApiErrorMiddleware")
    assert locale < middleware.index("django.middleware.common.CommonMiddleware")


def test_arena_languages_sets_the_languages_and_the_first_is_the_default():
    result = base_settings_with("fr, en")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "fr [('fr', 'French'), ('en', 'English')]"


def test_arena_languages_with_a_code_django_does_not_know_stops_the_start_naming_it():
    result = base_settings_with("en,klingon")
    assert result.returncode != 0
    assert "ARENA_LANGUAGES holds 'klingon'" in result.stderr


def test_a_visitor_without_a_preference_gets_english():
    response = Client().get("/about")
    assert html_lang(response) == "en" and response["Content-Language"] == "en"
    assert "About this arena" in response.content.decode()


@pytest.mark.parametrize("path", ["/about", "/"])
def test_a_browser_asking_for_french_gets_the_page_in_french(path):
    response = Client().get(path, **FRENCH)
    page = response.content.decode()
    assert response.status_code == 200 and html_lang(response) == "fr"
    assert response["Content-Language"] == "fr" and "Accept-Language" in response["Vary"]
    assert ">Classement</a>" in page and "Aller au contenu" in page
    assert ">Transparence</a>" in page and "Leaderboard</a>" not in page


def test_the_about_page_is_french_for_a_french_visitor():
    page = french_client().get("/about").content.decode()
    assert "À propos de cette arène" in page and "About this arena" not in page
    assert "1\u00a0751 votes" in page


def test_the_language_cookie_outranks_accept_language():
    client = Client()
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "en"
    response = client.get("/about", **FRENCH)
    assert html_lang(response) == "en"


def test_an_unknown_page_is_french_for_a_french_visitor():
    response = Client().get("/no-such-page", **FRENCH)
    page = response.content.decode()
    assert response.status_code == 404 and "Page introuvable" in page


def test_the_server_error_page_is_french_for_a_french_visitor(settings):
    settings.ROOT_URLCONF = "tests.errorurls"
    response = Client(raise_request_exception=False).get("/boom", **FRENCH)
    page = response.content.decode()
    assert response.status_code == 500 and 'lang="fr"' in page
    assert "Une erreur s’est produite" in page and "secret detail" not in page


def test_the_switcher_lists_each_language_under_its_own_name_with_the_current_one_chosen():
    page = french_client().get("/about").content.decode()
    form = page.split('data-testid="language-form"', 1)[1].split("</form>", 1)[0]
    assert '<option value="en" lang="en">English</option>' in form
    assert '<option value="fr" lang="fr" selected>Français</option>' in form
    assert (
        'name="csrfmiddlewaretoken"' in form and 'name="next" type="hidden" value="/about"' in form
    )


def test_the_switcher_sets_the_cookie_and_the_next_page_is_french():
    client = Client(enforce_csrf_checks=True)
    page = client.get("/about").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post(
        "/i18n/setlang/", {"language": "fr", "next": "/about", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302 and response["Location"] == "/about"
    cookie = response.cookies[settings.LANGUAGE_COOKIE_NAME]
    assert cookie.value == "fr" and int(cookie["max-age"]) == settings.LANGUAGE_COOKIE_AGE
    assert html_lang(client.get("/about")) == "fr"


def test_the_switcher_refuses_a_language_the_arena_does_not_have():
    client = Client()
    response = client.post("/i18n/setlang/", {"language": "xx", "next": "/about"})
    assert response.status_code == 302
    assert settings.LANGUAGE_COOKIE_NAME not in response.cookies
    assert html_lang(client.get("/about")) == "en"


def test_an_api_error_is_worded_in_french_with_its_code_in_english():
    client = Client(**FRENCH)
    client.get("/")  # the visitor's session
    response = vote_on_unknown_battle(client)
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Duel introuvable."}}
    english = Client()
    english.get("/")
    assert vote_on_unknown_battle(english).json()["error"]["message"] == "Battle not found."


def test_a_french_visitors_invalid_input_names_the_english_field_in_a_french_message():
    client = french_client()
    client.get("/")
    response = client.post("/api/battles", data="{not json", content_type="application/json")
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "invalid_json"
    assert error["field"] == "body"
    assert error["message"] == "Le corps de la requête n’est pas du JSON valide."


def test_the_apis_own_messages_are_french_for_a_french_visitor():
    client = french_client()
    client.get("/")
    refused = client.get("/api/battles")  # the operation takes POST only
    assert refused.status_code == 405 and "POST" in refused["Allow"]
    error = refused.json()["error"]
    assert error["code"] == "method_not_allowed"
    # French puts a no-break space before ";" and ":".
    assert error["message"] == (
        f"GET n’est pas autorisé ici\u00a0; méthodes autorisées\u00a0: {refused['Allow']}."
    )
    unknown = client.get("/api/no-such-thing")
    assert unknown.status_code == 404
    assert unknown.json()["error"] == {"code": "not_found", "message": "Introuvable."}
    assert Client().get("/api/no-such-thing").json()["error"]["message"] == "Not found."


def test_a_download_before_the_first_snapshot_says_so_in_french():
    response = french_client().get("/leaderboard.json")
    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "not_computed",
        "message": "Le classement n’a pas encore été calculé.",
    }


def test_a_shared_message_is_worded_when_the_body_is_built():
    error = still_streaming()
    with translation.override("fr"):
        assert error.as_dict()["error"]["message"] == (
            "Attendez d’abord les deux réponses (ou arrêtez-les)."
        )
        assert not_found("Run").as_frame()["message"] == "Run introuvable."
    with translation.override("en"):
        assert error.as_frame()["message"] == "Wait for both answers (or stop them) first."
    assert ArenaError(ErrorCode.INVALID, "Plain.").as_dict()["error"]["message"] == "Plain."


def test_the_scripts_catalogue_is_a_french_script_under_the_policy(settings):
    settings.CONTENT_SECURITY_POLICY = base.CONTENT_SECURITY_POLICY
    response = Client().get("/i18n/js/", **FRENCH)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    body = response.content.decode()
    assert '"Turn %(number)s": "Tour %(number)s"' in body
    catalogue = json.loads(body.split("const newcatalog = ", 1)[1].split(";\n", 1)[0])
    assert catalogue["The challenge could not be solved; reload the page."] == (
        "Le défi n’a pas pu être résolu\u00a0; rechargez la page."
    )


def test_the_scripts_catalogue_is_revalidated_per_language():
    french = Client().get("/i18n/js/", **FRENCH)
    english = Client().get("/i18n/js/")
    assert "no-cache" in french["Cache-Control"]
    assert french["ETag"] != english["ETag"]
    again = Client().get("/i18n/js/", HTTP_IF_NONE_MATCH=french["ETag"], **FRENCH)
    assert again.status_code == 304
    switched = Client().get("/i18n/js/", HTTP_IF_NONE_MATCH=french["ETag"])
    assert switched.status_code == 200 and b"Tour %(number)s" not in switched.content


def test_every_page_loads_the_catalogue_before_its_scripts():
    page = Client().get("/").content.decode()
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    assert scripts[0] == "/i18n/js/", scripts


def _session() -> str:
    store = SessionStore()
    store["arena_voter_id"] = "voter-fr"
    store.create()
    return store.session_key


@pytest.mark.django_db(transaction=True)
async def test_the_battle_socket_speaks_the_language_of_its_page():
    session_key = await database_sync_to_async(_session)()
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={session_key}".encode()),
        (b"accept-language", b"fr-FR,fr;q=0.9"),
    ]
    comm = WebsocketCommunicator(application, "/ws/battle", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_to(bytes_data=b"\x00")
    error = await comm.receive_json_from(10)
    assert error == {
        "type": "error",
        "code": "invalid_frame",
        "message": "Les messages sont du texte JSON, pas du binaire.",
        "field": "frame",
    }
    await comm.send_to(text_data="{nope")
    error = await comm.receive_json_from(10)
    assert error["message"] == "Le message n’est pas du JSON valide."
    await comm.disconnect()


@pytest.mark.parametrize(
    ("cookies", "accept", "expected"),
    [
        ({}, b"", "en"),
        ({}, b"fr-CA,fr;q=0.8", "fr"),
        ({"django_language": "en"}, b"fr", "en"),
        ({"django_language": "fr"}, b"", "fr"),
        ({"django_language": "xx"}, b"de", "en"),
    ],
)
def test_a_sockets_language_follows_the_cookie_then_accept_language(cookies, accept, expected):
    scope = {"cookies": cookies, "headers": [(b"accept-language", accept)] if accept else []}
    assert scope_language(scope) == expected
