"""Image battles in exports: the formats that hold images carry them, the others skip and count."""

import base64
import hashlib
import io
import json
from io import StringIO

import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from PIL import Image

from arena.exports import ExportStats, export_rows, voted_battles, write_parquet
from arena.live.images import image_upload
from arena.models import PromptImage
from arena.tests.factories import ArenaModelFactory
from arena.tests.images import jpeg_with_exif, png_bytes
from arena.tests.test_exports import hf_datasets  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

TEXT_ONLY = "image battles (the format holds text only; use arena or trl-vision)"


@pytest.fixture
def pair(db):
    return ArenaModelFactory(slug="owl-vl", supports_images=True), ArenaModelFactory(
        slug="lark-vl", supports_images=True
    )


@pytest.fixture
def image_vote(make_vote, pair):
    """A vote for A on a prompt with two images (a PNG, then a camera JPEG) and a text vote."""
    vote = make_vote(*pair, "model_a", prompt="What is in these pictures?", images=2)
    uploads = [png_bytes(40, 30), jpeg_with_exif(64, 48)]
    for position, data in enumerate(uploads):
        image = image_upload(session_key="s" * 32, upload=io.BytesIO(data))
        PromptImage.objects.filter(pk=image.pk).update(
            battle=vote.battle, prompt=vote.battle.prompt, position=position
        )
    make_vote(*pair, "model_b", prompt="A text question?")
    return vote


def stored(vote):
    return [i.file.read() for i in PromptImage.objects.filter(battle=vote.battle)]


def rows(fmt):
    stats = ExportStats()
    return list(export_rows(voted_battles(), fmt, stats)), stats


def test_an_arena_jsonl_row_carries_the_images_as_data_urls_in_order(image_vote):
    out = StringIO()
    call_command("export_votes", "--format=arena", stdout=out, stderr=StringIO())
    pictured, text = (json.loads(line) for line in out.getvalue().splitlines())
    assert text["images"] == []
    assert [(i["mime"], i["width"], i["height"]) for i in pictured["images"]] == [
        ("image/png", 40, 30),
        ("image/jpeg", 64, 48),
    ]
    for image, data in zip(pictured["images"], stored(image_vote), strict=True):
        header, encoded = image["url"].split(",", 1)
        assert header == f"data:{image['mime']};base64"
        assert base64.b64decode(encoded) == data
        assert image["sha256"] == hashlib.sha256(data).hexdigest()
    # The exported JPEG is the stored, re-encoded one: no camera make survives.
    assert b"SecretCamera" not in base64.b64decode(pictured["images"][1]["url"].split(",")[1])


def test_the_export_api_streams_image_rows_as_data_urls(admin_client, image_vote):
    response = admin_client.get("/api/exports/votes", {"format": "arena"})
    assert response.status_code == 200
    lines = b"".join(response).decode().splitlines()
    pictured = json.loads(lines[0])
    assert len(pictured["images"]) == 2 and pictured["images"][0]["url"].startswith("data:image")


@pytest.mark.parametrize("fmt", ["trl", "openai", "hh-rlhf", "kto", "kto-reactions"])
def test_text_only_formats_skip_image_battles_and_count_them(image_vote, fmt):
    written, stats = rows(fmt)
    assert stats.skipped[TEXT_ONLY] == 1
    assert all("What is in these pictures?" not in json.dumps(row) for row in written)


def test_trl_vision_holds_only_image_battles_and_counts_the_others(image_vote):
    (row,), stats = rows("trl-vision")
    assert stats.skipped == {
        "battles without an image (the format is for vision models; use trl)": 1
    }
    assert row["prompt"] == [{"role": "user", "content": "What is in these pictures?"}]
    assert [i.mime for i in row["images"]] == ["image/png", "image/jpeg"]


@pytest.mark.parametrize("fmt", ["arena", "trl-vision"])
def test_a_parquet_export_loads_its_images_as_pil_images_with_datasets(
    hf_datasets,  # noqa: F811
    image_vote,
    tmp_path,
    fmt,
):
    folder = tmp_path / "export"
    call_command("export_votes", f"--format={fmt}", f"-o={folder}/", "--parquet", stderr=StringIO())
    for source in ("folder", "file"):
        # The folder's card declares the images, and so does the Parquet file on its own.
        train = (
            hf_datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "c1"))
            if source == "folder"
            else hf_datasets.load_dataset(
                "parquet",
                data_files=str(folder / f"arena-votes-{fmt}.parquet"),
                split="train",
                cache_dir=str(tmp_path / "c2"),
            )
        )
        assert train.features["images"] == hf_datasets.List(hf_datasets.Image())
        images = train[0]["images"]
        assert [type(i).__module__.split(".")[0] for i in images] == ["PIL", "PIL"]
        assert [i.size for i in images] == [(40, 30), (64, 48)]
        # The pixels are the stored file's.
        first = Image.open(io.BytesIO(stored(image_vote)[0])).convert("RGB")
        assert images[0].convert("RGB").tobytes() == first.tobytes()
    if fmt == "arena":
        assert train.num_rows == 2 and train[1]["images"] == []
    else:
        assert train.num_rows == 1 and train[0]["chosen"][0]["role"] == "assistant"


def test_a_jsonl_folder_of_image_rows_loads_with_datasets(hf_datasets, image_vote, tmp_path):  # noqa: F811
    folder = tmp_path / "export"
    call_command("export_votes", "--format=trl-vision", f"-o={folder}/", stderr=StringIO())
    train = hf_datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "c"))
    assert train[0]["images"][0]["mime"] == "image/png"
    assert train[0]["images"][0]["url"].startswith("data:image/png;base64,")


def test_a_parquet_row_group_of_images_closes_at_its_byte_budget(image_vote, tmp_path, monkeypatch):
    records = [r for r in voted_battles() if r.images] * 30  # 30 image rows

    def row_groups() -> int:
        path = tmp_path / "vision.parquet"
        write_parquet(export_rows(records, "trl-vision", ExportStats()), path, "trl-vision")
        parquet = pq.ParquetFile(path)
        assert parquet.metadata.num_rows == 30
        return parquet.metadata.num_row_groups

    assert row_groups() == 1  # far below the budget: one group
    monkeypatch.setattr("arena.exports.writers.IMAGE_GROUP_BYTES", 1)
    # Image rows are converted 20 at a time; each batch fills the 1-byte budget and closes
    # its group, so no group holds more than one batch of images.
    assert row_groups() == 2
