"""Pool prompts with images: copied in through the upload checks, shown in pool battles."""

import http.server
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from PIL import Image

from arena.models import Prompt, PromptImage
from arena.tests.images import bomb_png, jpeg_with_exif, png_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

# The test's image server listens on loopback, which the import fetches from only when told.
LOOPBACK_ALLOWED = ("--images-allow-host", "127.0.0.1/32")


class _Images(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        data = self.files.get(self.path)
        if data is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")  # whatever it says, the content decides
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def image_host() -> Iterator[str]:
    """A real HTTP server on loopback serving ``_Images.files``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        _Images.files = {}


def pool_file(tmp_path, images_a, images_b=None, prompt="What is in the picture?"):
    rows = [
        {"prompt": prompt, "model": "owl-vl", "completion": "A cat.", "images": images_a},
        {
            "prompt": prompt,
            "model": "lark-vl",
            "completion": "A dog.",
            "images": images_a if images_b is None else images_b,
        },
    ]
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_path_and_a_url_are_copied_in_stripped_and_in_order(tmp_path, image_host):
    (tmp_path / "cat.jpg").write_bytes(jpeg_with_exif(80, 60))
    _Images.files = {"/dog.png": png_bytes(32, 24)}
    path = pool_file(tmp_path, ["cat.jpg", f"{image_host}/dog.png"])
    out = io.StringIO()
    call_command("import_pool", str(path), *LOOPBACK_ALLOWED, stdout=out)
    assert "2 images" in out.getvalue()
    prompt = Prompt.objects.get()
    assert prompt.image_count == 2
    images = list(prompt.images.order_by("position"))
    assert [(i.mime, i.width, i.height) for i in images] == [
        ("image/jpeg", 80, 60),
        ("image/png", 32, 24),
    ]
    stored = images[0].file.read()
    assert b"SecretCamera" not in stored  # the camera's EXIF is gone
    assert images[0].battle_id is None and images[0].session_hash == ""


def test_reimporting_the_file_stores_nothing_more(tmp_path):
    (tmp_path / "cat.png").write_bytes(png_bytes())
    path = pool_file(tmp_path, ["cat.png"])
    call_command("import_pool", str(path), stdout=io.StringIO())
    call_command("import_pool", str(path), stdout=io.StringIO())
    assert Prompt.objects.count() == 1 and PromptImage.objects.count() == 1


def test_the_same_text_with_another_image_is_another_prompt(tmp_path):
    (tmp_path / "cat.png").write_bytes(png_bytes(10, 10))
    (tmp_path / "dog.png").write_bytes(png_bytes(20, 20))
    call_command("import_pool", str(pool_file(tmp_path, ["cat.png"])), stdout=io.StringIO())
    call_command("import_pool", str(pool_file(tmp_path, ["dog.png"])), stdout=io.StringIO())
    assert Prompt.objects.count() == 2


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("renamed.png", b"%PDF-1.4 not an image", "judged by its content"),
        ("bomb.png", None, "pixels"),
        ("truncated.png", png_bytes(200, 200)[:300], "corrupt or truncated"),
        ("missing.png", b"", "cannot read missing.png"),
    ],
    ids=["wrong-type", "bomb", "corrupt", "missing"],
)
def test_a_bad_image_is_reported_with_its_line_and_nothing_is_imported(
    tmp_path, settings, name, data, expected
):
    (tmp_path / "good.png").write_bytes(png_bytes())
    if name != "missing.png":
        (tmp_path / name).write_bytes(bomb_png() if data is None else data)
    path = pool_file(tmp_path, ["good.png"], [name])
    with pytest.raises(CommandError) as refused:
        call_command("import_pool", str(path))
    message = str(refused.value)
    assert "line 2: image" in message and expected.lower() in message.lower()
    assert "Nothing was imported" in message
    assert not Prompt.objects.exists() and not PromptImage.objects.exists()
    assert not [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


def test_a_url_that_fails_is_reported_with_its_status(tmp_path, image_host):
    path = pool_file(tmp_path, [f"{image_host}/gone.png"])
    with pytest.raises(CommandError, match="answered HTTP 404"):
        call_command("import_pool", str(path), *LOOPBACK_ALLOWED)


def test_an_oversized_image_names_the_limit(tmp_path, settings):
    settings.ARENA_IMAGE_MAX_BYTES = 1024
    (tmp_path / "big.png").write_bytes(png_bytes(400, 400, mode="RGB") + b"\0" * 2048)
    with pytest.raises(CommandError, match="ARENA_IMAGE_MAX_BYTES"):
        call_command("import_pool", str(pool_file(tmp_path, ["big.png"])))


def test_too_many_images_name_the_limit(tmp_path, settings):
    settings.ARENA_IMAGE_MAX_PER_PROMPT = 1
    with pytest.raises(CommandError, match="ARENA_IMAGE_MAX_PER_PROMPT"):
        call_command("import_pool", str(pool_file(tmp_path, ["a.png", "b.png"])))


def test_a_pool_battle_on_an_image_prompt_shows_its_images(tmp_path, client):
    (tmp_path / "cat.png").write_bytes(png_bytes(30, 20))
    call_command("import_pool", str(pool_file(tmp_path, ["cat.png"])), stdout=io.StringIO())
    client.get("/")  # a session
    started = client.post("/api/battles", content_type="application/json")
    assert started.status_code == 201, started.content
    (url,) = started.json()["images"]
    image = client.get(url)
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(image.content)).size == (30, 20)


def test_the_images_stay_on_the_next_battle_and_the_vote_answer(tmp_path, visitor):
    client = visitor
    (tmp_path / "cat.png").write_bytes(png_bytes(30, 20))
    call_command("import_pool", str(pool_file(tmp_path, ["cat.png"])), stdout=io.StringIO())
    first = client.post("/api/battles", content_type="application/json").json()
    # The second start reads the ids from the process's copies, not the table.
    second = client.post("/api/battles", content_type="application/json").json()
    assert second["images"] == first["images"] and len(first["images"]) == 1
    voted = client.post(
        f"/api/battles/{second['id']}/vote",
        json.dumps({"winner": "tie"}),
        content_type="application/json",
    )
    assert voted.status_code == 201, voted.content
    assert voted.json()["images"] == first["images"]


def test_a_path_outside_the_files_folder_is_refused(tmp_path):
    folder = tmp_path / "pool"
    folder.mkdir()
    (tmp_path / "secret.png").write_bytes(png_bytes())
    for reference in ("../secret.png", str(tmp_path / "secret.png")):
        with pytest.raises(CommandError, match="outside the images folder"):
            call_command("import_pool", str(pool_file(folder, [reference])))
    assert not PromptImage.objects.exists()


def test_a_symlink_escaping_the_folder_is_refused(tmp_path):
    folder = tmp_path / "pool"
    folder.mkdir()
    (tmp_path / "secret.png").write_bytes(png_bytes())
    (folder / "cat.png").symlink_to(tmp_path / "secret.png")
    with pytest.raises(CommandError, match="outside the images folder"):
        call_command("import_pool", str(pool_file(folder, ["cat.png"])))


def test_the_images_root_option_names_the_folder_images_are_read_from(tmp_path):
    pool, images = tmp_path / "pool", tmp_path / "images"
    pool.mkdir()
    images.mkdir()
    (images / "cat.png").write_bytes(png_bytes())
    (pool / "dog.png").write_bytes(png_bytes())
    path = pool_file(pool, ["cat.png"])
    call_command("import_pool", str(path), "--images-root", str(images), stdout=io.StringIO())
    assert PromptImage.objects.count() == 1
    with pytest.raises(CommandError, match="outside the images folder"):
        call_command(
            "import_pool",
            str(pool_file(pool, [str(pool / "dog.png")])),
            "--images-root",
            str(images),
        )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_loopback_url_is_refused_and_never_fetched(tmp_path, image_host, host):
    # localhost resolves through the tests' stub resolver (conftest), to loopback.
    _Images.files = {"/dog.png": png_bytes()}
    port = image_host.rsplit(":", 1)[1]
    path = pool_file(tmp_path, [f"http://{host}:{port}/dog.png"])
    with pytest.raises(CommandError, match="loopback address"):
        call_command("import_pool", str(path))
    assert not PromptImage.objects.exists()


def test_a_url_to_a_private_network_is_refused(tmp_path):
    path = pool_file(tmp_path, ["http://169.254.169.254/latest/meta-data/"])
    with pytest.raises(CommandError, match="metadata address"):
        call_command("import_pool", str(path))
