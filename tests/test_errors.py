"""Errors: the API's JSON shape under /api/ (whatever produced the error), pages for humans."""

import logging

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def assert_api_error(response, status: int, code: str) -> dict:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    assert set(error) <= {"code", "message", "field"}
    return error


@pytest.fixture
def failing_urls(settings):
    settings.ROOT_URLCONF = "tests.errorurls"


@pytest.fixture
def client():
    return Client(raise_request_exception=False)


def test_unknown_api_path_is_a_json_404(client):
    assert_api_error(client.get("/api/nothing-here"), 404, "not_found")


@pytest.mark.parametrize(
    "path",
    [
        "/api/battles/..%2F..%2Fetc%2Fpasswd",
        "/api/%2e%2e/%2e%2e/etc/passwd",
        "/api%2f..%2fadmin/",
        "/api/battles/x/vote/../../terms",
    ],
)
def test_an_encoded_traversal_under_the_api_is_a_json_404(client, path):
    assert_api_error(client.get(path), 404, "not_found")


def test_wrong_method_on_an_api_endpoint_is_a_json_405_naming_the_allowed_one(client):
    response = client.get("/api/battles")
    error = assert_api_error(response, 405, "method_not_allowed")
    assert response["Allow"] == "POST" and "GET" in error["message"]


@pytest.mark.parametrize("path", ["/leaderboard.csv", "/leaderboard.json"])
@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_wrong_method_on_a_download_is_a_json_405_naming_the_allowed_ones(client, path, method):
    response = getattr(client, method)(path)
    error = assert_api_error(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET" and method.upper() in error["message"]


def test_an_unknown_download_is_a_json_404(client):
    assert_api_error(client.get("/leaderboard.xml.json"), 404, "not_found")


def test_a_download_before_the_first_snapshot_is_a_json_404_saying_so(client):
    error = assert_api_error(client.get("/leaderboard.csv"), 404, "not_computed")
    assert "not been computed" in error["message"]


def test_csrf_failure_on_the_api_is_json(db):
    client = Client(enforce_csrf_checks=True)
    client.get("/")  # a session and a CSRF cookie, but no token sent back
    error = assert_api_error(client.post("/api/terms"), 403, "csrf_failed")
    assert "Reload the page" in error["message"]


def test_every_write_of_the_api_document_is_refused_without_a_csrf_token(db):
    # django-ninja exempts its views from the CSRF check; the visitor API's are checked again.
    client = Client(enforce_csrf_checks=True)
    client.get("/")
    document = client.get("/api/openapi.json").json()
    writes = [
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in ("post", "put", "patch", "delete")
    ]
    assert len(writes) == 8  # the visitor API and the red-team profile opt-in
    for method, path in writes:
        url = path.replace("{battle_id}", "00000000-0000-0000-0000-000000000000")
        url = url.replace("{side}", "a")
        response = getattr(client, method)(url, data="{}", content_type="application/json")
        assert_api_error(response, 403, "csrf_failed")


def test_csrf_failure_on_a_page_is_a_page(settings):
    client = Client(enforce_csrf_checks=True)
    response = client.post(f"/{settings.ADMIN_URL}login/", {"username": "a", "password": "b"})
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")
    assert b"This form could not be checked" in response.content
    assert b'class="site-header"' in response.content  # the site's own page, not Django's


def test_a_body_over_the_upload_limit_is_a_json_400(client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = client.post("/api/battles/any/vote", "x" * 1000, content_type="application/json")
    assert_api_error(response, 400, "request_too_large")


def test_unexpected_exception_under_the_api_is_a_generic_json_500_and_logged(
    client, failing_urls, caplog
):
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get("/api/boom")
    error = assert_api_error(response, 500, "server_error")
    assert "secret detail" not in response.content.decode()
    assert "logged" in error["message"]
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "secret detail" in str(logged[0].exc_info[1])


def test_unexpected_exception_on_a_page_is_the_plain_500_page(client, failing_urls):
    response = client.get("/boom")
    assert response.status_code == 500
    assert b"Something went wrong" in response.content
    assert b"secret detail" not in response.content and b"Traceback" not in response.content


def test_with_debug_on_the_api_still_answers_json_never_a_debug_page(
    client, failing_urls, settings
):
    settings.DEBUG = True
    assert_api_error(client.get("/api/nothing-here"), 404, "not_found")
    response = client.get("/api/boom")
    assert_api_error(response, 500, "server_error")
    assert b"secret detail" not in response.content


def test_unknown_page_is_the_site_404_page(client):
    response = client.get("/no-such-page")
    assert response.status_code == 404
    assert b"Page not found" in response.content and b'class="site-header"' in response.content


def test_a_nul_in_a_page_path_is_the_site_404_page(client):
    # PostgreSQL refuses a NUL in the share's lookup; no page has one in its path.
    response = client.get("/s/a%00b.png")
    assert response.status_code == 404
    assert b"Page not found" in response.content


def test_a_nul_in_an_api_path_is_a_json_404(client):
    assert_api_error(client.get("/api/battles/%00"), 404, "not_found")


def test_error_templates_render_on_their_own():
    from django.template import loader

    for name in ("400.html", "403.html", "403_csrf.html", "404.html"):
        assert "site-header" in loader.render_to_string(name)
    # 500.html needs no context, no static files and no database.
    page = loader.get_template("500.html").render()
    assert "Something went wrong" in page and "{%" not in page and "/static/" not in page


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/leaderboard/", "/leaderboard"),
        ("/leaderboard/?category=coding&style=off", "/leaderboard?category=coding&style=off"),
        ("/about/", "/about"),
    ],
)
def test_slash_forms_of_pages_redirect_permanently_to_the_canonical_url(client, path, target):
    response = client.get(path)
    assert response.status_code == 301 and response["Location"] == target


LOCAL_404 = "config.middleware.SiteNotFoundPageMiddleware"


def test_the_laptop_settings_serve_the_site_404_page(settings):
    from config.settings import local

    assert local.DEBUG and LOCAL_404 in local.MIDDLEWARE


def test_with_debug_on_an_unknown_page_is_the_site_404_page_not_the_url_list(client, settings):
    settings.DEBUG = True
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOCAL_404]
    response = client.get("/no-such-page")
    assert response.status_code == 404
    assert b"Page not found" in response.content and b'class="site-header"' in response.content
    assert b"URLconf" not in response.content and b"admin/" not in response.content


def test_with_debug_on_the_middleware_leaves_the_api_404_as_json(client, settings):
    settings.DEBUG = True
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOCAL_404]
    assert_api_error(client.get("/api/nothing-here"), 404, "not_found")


def test_without_the_middleware_debug_would_list_the_url_patterns(client, settings):
    """What the middleware protects the demo from (so the test above can fail)."""
    settings.DEBUG = True
    response = client.get("/no-such-page")
    assert response.status_code == 404 and b"URLconf" in response.content
