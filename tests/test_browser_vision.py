"""In Chromium at a desktop (1366x900) and a phone (390x844, touch): an image battle end to end
against the loopback fake upstream, and each bad upload refused on the page with its message."""

import base64

import pytest
from playwright.sync_api import expect

from arena.models import ArenaModel, Battle, PromptImage, Vote
from arena.tests.fake_openai import FakeModel
from arena.tests.images import bomb_png, corrupt_png, png_bytes
from tests.test_browser_live import open_live_page, send_prompt, wait_both_done

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def vision_models(live_models, fake_upstream):
    ArenaModel.objects.filter(pk__in=[m.pk for m in live_models]).update(supports_images=True)
    fake_upstream.models["upstream-quokka-1"] = FakeModel(tokens=["A red ", "square."])
    fake_upstream.models["upstream-quokka-2"] = FakeModel(tokens=["Something ", "red."])
    return live_models


def test_an_image_battle_streams_both_answers_and_the_models_receive_the_image(
    asgi_server, sized_page, fake_upstream, vision_models, media_root
):
    page = sized_page
    open_live_page(page, asgi_server)
    page.get_by_test_id("attach-input").set_input_files(
        files=[{"name": "square.png", "mimeType": "image/png", "buffer": png_bytes(40, 30)}]
    )
    item = page.get_by_test_id("attach-item")
    expect(item).to_contain_text("40×30")
    expect(item.locator("img")).to_have_count(1)

    send_prompt(page, "What is in this picture?")
    wait_both_done(page)
    expect(page.get_by_test_id("attach-item")).to_have_count(0)  # sent with this prompt

    chats = [r for r in fake_upstream.requests if r.body.get("messages")]
    assert len(chats) == 2
    stored = PromptImage.objects.get()
    data = stored.file.open("rb").read()
    for request in chats:
        assert request.content_parts[0] == {"type": "text", "text": "What is in this picture?"}
        assert len(request.image_urls) == 1
        url = request.image_urls[0]
        assert url.startswith("data:image/png;base64,")
        assert base64.b64decode(url.split(",", 1)[1]) == data

    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A", use_inner_text=True)
    vote = Vote.objects.select_related("battle__prompt").get()
    assert vote.battle.source == Battle.Source.LIVE and vote.battle.prompt.image_count == 1
    assert PromptImage.objects.get().battle_id == vote.battle_id


# Each bad upload, as a visitor would pick it (a file named .png), and the words of its refusal.
BAD_UPLOADS = {
    "text renamed png": (lambda: b"plain text\n" * 50, "not a PNG, JPEG, WebP or GIF"),
    "oversize": (lambda: png_bytes(400, 400) + b"\0" * 4096, "larger than 2048 bytes"),
    "decompression bomb": (lambda: bomb_png(12_000), "decompression bomb"),
    "corrupt": (corrupt_png, "corrupt or truncated"),
}


@pytest.mark.parametrize("bad", sorted(BAD_UPLOADS))
def test_each_bad_upload_is_refused_on_the_page_with_its_message(
    asgi_server, sized_page, vision_models, media_root, settings, bad
):
    if bad == "oversize":
        settings.ARENA_IMAGE_MAX_BYTES = 2048
    make, words = BAD_UPLOADS[bad]
    page = sized_page
    open_live_page(page, asgi_server)
    page.get_by_test_id("attach-input").set_input_files(
        files=[{"name": "picture.png", "mimeType": "image/png", "buffer": make()}]
    )

    expect(page.get_by_test_id("attach-error")).to_contain_text(words)
    expect(page.get_by_test_id("attach-item")).to_have_count(0)
    assert PromptImage.objects.count() == 0
    assert not media_root.exists() or not [p for p in media_root.rglob("*") if p.is_file()]
