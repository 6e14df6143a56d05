"""The site's icon: linked from every page, and ``/favicon.ico`` answered, never a 404."""

from django.templatetags.static import static

from config.settings.base import BASE_DIR


def test_favicon_ico_redirects_to_the_shipped_svg_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == static("favicon.svg")
    icon = (BASE_DIR / "static" / "favicon.svg").read_text(encoding="utf-8")
    assert icon.startswith("<svg") and 'xmlns="http://www.w3.org/2000/svg"' in icon


def test_pages_link_the_icon(client, db):
    html = client.get("/about").content.decode()
    assert f'<link rel="icon" href="{static("favicon.svg")}" type="image/svg+xml">' in html


def test_the_404_page_links_the_icon_too(client, db):
    response = client.get("/no-such-page")
    assert response.status_code == 404
    assert static("favicon.svg") in response.content.decode()
