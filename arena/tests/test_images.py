"""Image uploads for live prompts: each bad file refused with its message and nothing stored;
a good one stored re-encoded without metadata and served with safe headers."""

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image

from arena.models import PromptImage
from arena.tests.images import (
    bomb_png,
    corrupt_png,
    jpeg_with_exif,
    noise_jpeg,
    noise_png,
    noisy_png,
    palette_noise_png,
    png_bytes,
    zero_png,
)


def upload(client, data: bytes, name: str = "photo.png", content_type: str = "image/png"):
    return client.post(
        "/api/images", {"image": SimpleUploadedFile(name, data, content_type=content_type)}
    )


def stored_files(media_root) -> list:
    return [p for p in media_root.rglob("*") if p.is_file()] if media_root.exists() else []


def assert_refused(response, status: int, words: str, media_root) -> None:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["field"] == "image"
    assert words in error["message"]
    assert PromptImage.objects.count() == 0
    assert stored_files(media_root) == []


def test_a_png_is_stored_re_encoded_and_described(visitor, media_root):
    response = upload(visitor, png_bytes(64, 48))

    assert response.status_code == 201
    body = response.json()
    image = PromptImage.objects.get(pk=body["id"])
    assert (body["width"], body["height"], body["mime"]) == (64, 48, "image/png")
    assert (image.width, image.height, image.mime, image.size) == (
        64,
        48,
        "image/png",
        body["size"],
    )
    assert len(image.sha256) == 64 and image.battle_id is None
    assert image.session_hash and image.file.name.startswith("prompt-images/")
    assert "photo" not in image.file.name  # the visitor's name is never used
    assert stored_files(media_root) == [media_root / image.file.name]


def test_exif_and_other_metadata_are_stripped(visitor, media_root):
    original = jpeg_with_exif()
    assert b"SecretCamera" in original

    response = upload(visitor, original, name="camera.jpg", content_type="image/jpeg")

    assert response.status_code == 201
    image = PromptImage.objects.get(pk=response.json()["id"])
    data = (media_root / image.file.name).read_bytes()
    assert b"SecretCamera" not in data and b"WhereIWas" not in data
    reopened = Image.open(io.BytesIO(data))
    assert reopened.format == "JPEG" and image.mime == "image/jpeg"
    assert not reopened.getexif()


def test_a_text_file_renamed_png_is_refused_by_its_content(visitor, media_root):
    response = upload(visitor, b"just some text, not an image\n" * 20, name="cat.png")

    assert_refused(response, 400, "not a PNG, JPEG, WebP or GIF", media_root)


def test_an_oversize_file_is_refused_naming_the_limit(visitor, media_root, settings):
    settings.ARENA_IMAGE_MAX_BYTES = 2048
    data = png_bytes(400, 400, mode="RGB")
    big = data + b"\0" * 4096  # over the limit whatever the encoder made of it

    response = upload(visitor, big)

    assert_refused(response, 413, "larger than 2048 bytes (ARENA_IMAGE_MAX_BYTES)", media_root)
    assert response.json()["error"]["code"] == "request_too_large"


def test_a_decompression_bomb_is_refused(visitor, media_root):
    data = bomb_png(12_000)  # 144 million pixels in a few kilobytes
    assert len(data) < 100_000

    response = upload(visitor, data)

    assert_refused(response, 400, "decompression bomb", media_root)
    assert "ARENA_IMAGE_MAX_PIXELS" in response.json()["error"]["message"]


def test_pillows_own_bomb_guard_is_turned_into_the_same_refusal(visitor, media_root, settings):
    # Past Pillow's own limit (MAX_IMAGE_PIXELS, about 89 million; an error past twice that),
    # whatever the arena's limit is set to.
    settings.ARENA_IMAGE_MAX_PIXELS = 200_000_000

    response = upload(visitor, bomb_png(14_000))

    assert_refused(response, 400, "decompression bomb", media_root)


def test_an_image_over_the_pixel_limit_is_refused(visitor, media_root, settings):
    settings.ARENA_IMAGE_MAX_PIXELS = 1000

    response = upload(visitor, png_bytes(40, 40))

    assert_refused(response, 400, "more than 1000 pixels", media_root)


def test_a_truncated_file_is_refused(visitor, media_root):
    whole = noisy_png()

    response = upload(visitor, whole[: len(whole) // 2])

    assert_refused(response, 400, "corrupt or truncated", media_root)


def test_a_corrupt_file_is_refused(visitor, media_root):
    response = upload(visitor, corrupt_png())

    assert_refused(response, 400, "corrupt or truncated", media_root)


def test_no_file_is_a_clear_error(visitor, media_root):
    response = visitor.post("/api/images", {})

    assert_refused(response, 400, "Attach an image file", media_root)


def test_the_upload_needs_the_csrf_token(db, media_root):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.get("/")

    response = upload(client, png_bytes())

    assert response.status_code == 403
    assert PromptImage.objects.count() == 0


def test_a_stored_image_is_served_with_safe_headers(visitor, media_root):
    body = upload(visitor, png_bytes(20, 10)).json()

    response = visitor.get(body["url"])

    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"].startswith("inline;")
    assert "sandbox" in response["Content-Security-Policy"]
    assert Image.open(io.BytesIO(response.content)).size == (20, 10)


def test_an_unknown_image_id_is_a_404(visitor, media_root):
    response = visitor.get("/images/00000000-0000-4000-8000-000000000000")

    assert response.status_code == 404


@pytest.mark.parametrize("policy", ["allow", "refuse"])
def test_the_image_policy_setting_is_read(settings, policy):
    from arena.live.moderation import prompt_verdict

    settings.ARENA_MODERATION_PROVIDER = ""
    settings.ARENA_IMAGE_POLICY = policy

    verdict = prompt_verdict("What is this?", ["data:image/png;base64,AAAA"])

    assert verdict.refused is (policy == "refuse")
    assert prompt_verdict("What is this?").refused is False


def test_images_no_battle_took_are_swept_within_the_hour_and_others_stay(visitor, media_root):
    from datetime import timedelta

    from django.utils import timezone

    from arena.live.images import prompt_images_sweep
    from arena.tests.factories import BattleFactory

    old, taken, fresh = (
        PromptImage.objects.get(pk=upload(visitor, png_bytes()).json()["id"]) for _ in range(3)
    )
    PromptImage.objects.filter(pk__in=[old.pk, taken.pk]).update(
        created_at=timezone.now() - timedelta(minutes=50)
    )
    PromptImage.objects.filter(pk=taken.pk).update(battle=BattleFactory())

    assert prompt_images_sweep() == 1
    assert prompt_images_sweep() == 0  # a rerun finds nothing more
    assert set(PromptImage.objects.values_list("pk", flat=True)) == {taken.pk, fresh.pk}
    assert sorted(p.name for p in stored_files(media_root)) == sorted(
        p.rsplit("/", 1)[1] for p in (taken.file.name, fresh.file.name)
    )


def test_the_admin_model_form_offers_supports_images(admin_client):
    from django.urls import reverse

    response = admin_client.get(reverse("admin:arena_arenamodel_add"))

    assert response.status_code == 200
    assert b'name="supports_images"' in response.content


# --- what is stored, and what an upload may cost ---------------------------------------------
@pytest.fixture
def decodes(monkeypatch) -> list[tuple[int, int]]:
    """The sizes of the images whose pixels were decoded (Pillow's ``ImageFile.load``)."""
    from PIL import ImageFile

    seen: list[tuple[int, int]] = []
    load = ImageFile.ImageFile.load

    def counting(self):
        seen.append(self.size)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counting)
    return seen


def stored_bytes(media_root, response) -> bytes:
    image = PromptImage.objects.get(pk=response.json()["id"])
    return (media_root / image.file.name).read_bytes()


def test_a_noise_jpeg_is_stored_within_the_byte_limit(visitor, media_root, settings):
    # Noise at quality 20 re-encodes at the stored quality to about three times its size.
    data = noise_jpeg(600, 600, quality=20)
    settings.ARENA_IMAGE_MAX_BYTES = len(data) + 1024

    response = upload(visitor, data, name="noise.jpg", content_type="image/jpeg")

    assert response.status_code == 201, response.content
    stored = stored_bytes(media_root, response)
    assert len(stored) <= settings.ARENA_IMAGE_MAX_BYTES
    assert response.json()["size"] == len(stored)
    assert Image.open(io.BytesIO(stored)).size == (600, 600)


def test_a_photo_like_png_is_stored_as_a_jpeg_within_the_byte_limit(visitor, media_root, settings):
    data = noise_png(300, 300)
    settings.ARENA_IMAGE_MAX_BYTES = len(data)

    response = upload(visitor, data)

    assert response.status_code == 201, response.content
    assert response.json()["mime"] == "image/jpeg"
    assert len(stored_bytes(media_root, response)) <= settings.ARENA_IMAGE_MAX_BYTES


def test_a_transparent_image_over_the_limit_once_re_encoded_is_refused(
    visitor, media_root, settings
):
    # 256 colours, one byte a pixel, become four once re-encoded as RGBA; transparency rules
    # out a JPEG, so nothing fits.
    data = palette_noise_png(300, 300)
    settings.ARENA_IMAGE_MAX_BYTES = len(data) + 1024

    response = upload(visitor, data)

    assert_refused(response, 413, "ARENA_IMAGE_MAX_BYTES", media_root)
    assert response.json()["error"]["code"] == "request_too_large"


def test_the_default_pixel_limit_refuses_25_megapixels_before_decoding(
    visitor, media_root, decodes
):
    data = zero_png(5000, 5000)  # a few tens of kilobytes
    assert len(data) < 100_000

    response = upload(visitor, data)

    assert_refused(response, 400, "ARENA_IMAGE_MAX_PIXELS", media_root)
    assert decodes == []


@pytest.mark.parametrize("size", [(20_000, 10), (10, 20_000)])
def test_an_extreme_aspect_ratio_is_refused_before_decoding(visitor, media_root, decodes, size):
    response = upload(visitor, zero_png(*size))

    assert_refused(response, 400, "ARENA_IMAGE_MAX_ASPECT_RATIO", media_root)
    assert decodes == []


def test_a_25_million_by_1_image_is_refused_before_decoding(visitor, media_root, decodes, settings):
    settings.ARENA_IMAGE_MAX_PIXELS = 100_000_000  # the aspect ratio alone refuses it

    response = upload(visitor, zero_png(25_000_000, 1))

    assert_refused(response, 400, "ARENA_IMAGE_MAX_ASPECT_RATIO", media_root)
    assert decodes == []


def test_an_image_over_its_cpu_budget_is_refused_naming_the_setting(
    visitor, media_root, settings, monkeypatch
):
    from arena import cpu_budget

    # A clock that moves a second at each reading: the first check is past any budget.
    ticks = iter(range(10_000))
    monkeypatch.setattr(cpu_budget, "_clock", lambda: float(next(ticks)))

    response = upload(visitor, png_bytes(64, 48))

    assert_refused(response, 400, "ARENA_IMAGE_CPU_SECONDS", media_root)


# --- daily quotas of unattached bytes ---------------------------------------------------------
def test_a_session_over_its_unattached_bytes_for_the_day_is_refused(visitor, media_root, settings):
    first = upload(visitor, png_bytes(64, 48))
    assert first.status_code == 201
    settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION = 2 * first.json()["size"] + 10

    assert upload(visitor, png_bytes(64, 48)).status_code == 201
    response = upload(visitor, png_bytes(64, 48))

    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error["code"] == "image_quota" and error["field"] == "image"
    assert "ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION" in error["message"]
    assert PromptImage.objects.count() == 2
    assert len(stored_files(media_root)) == 2


def test_an_address_over_its_unattached_bytes_for_the_day_is_refused(db, media_root, settings):
    from django.test import Client

    clients = []
    for _ in range(3):
        client = Client(REMOTE_ADDR="203.0.113.9")
        client.get("/")
        clients.append(client)
    first = upload(clients[0], png_bytes(64, 48))
    assert first.status_code == 201
    settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_IP = 2 * first.json()["size"] + 10

    assert upload(clients[1], png_bytes(64, 48)).status_code == 201
    response = upload(clients[2], png_bytes(64, 48))

    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error["code"] == "image_quota"
    assert "ARENA_IMAGE_UNATTACHED_BYTES_PER_IP" in error["message"]
    assert PromptImage.objects.count() == 2


def test_the_quota_message_is_translated(visitor, media_root, settings):
    settings.ARENA_IMAGE_UNATTACHED_BYTES_PER_SESSION = 10

    response = visitor.post(
        "/api/images",
        {"image": SimpleUploadedFile("a.png", png_bytes(), content_type="image/png")},
        headers={"accept-language": "fr"},
    )

    assert response.status_code == 429
    assert "aujourd" in response.json()["error"]["message"]


def test_an_unattached_upload_is_gone_within_the_hour():
    from celery.schedules import crontab

    from arena.live.images import UNATTACHED_IMAGE_MINUTES
    from config.schedule import BEAT_SCHEDULE

    schedule = BEAT_SCHEDULE["arena-prompt-images-sweep"]["schedule"]
    assert isinstance(schedule, crontab) and schedule.hour == set(range(24))
    minutes = sorted(schedule.minute)
    gaps = [b - a for a, b in zip(minutes, minutes[1:], strict=False)]
    longest_gap = max([*gaps, minutes[0] + 60 - minutes[-1]])
    assert UNATTACHED_IMAGE_MINUTES + longest_gap <= 60
