"""An export of image battles trains a vision-language model with TRL's DPOTrainer.

The arena writes the ``trl-vision`` export (Parquet, with its card) of real stored images; the
trainers' virtualenv (the newest TRL, transformers and datasets) loads it and trains one DPO
step of a tiny LLaVA on it (``client/tests/trainers/dpo_vision.py``).
"""

import io
import json
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from arena.live.images import image_upload
from arena.models import PromptImage
from arena.tests.factories import ArenaModelFactory
from arena.tests.images import jpeg_with_exif, png_bytes
from conftest import TRAINERS_PYTHON

pytestmark = [pytest.mark.trainers, pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

SCRIPT = Path(__file__).resolve().parent.parent / "client" / "tests" / "trainers" / "dpo_vision.py"


def test_a_trl_vision_export_trains_a_vision_model_one_dpo_step(make_vote, tmp_path):
    a = ArenaModelFactory(slug="owl-vl", supports_images=True)
    b = ArenaModelFactory(slug="lark-vl", supports_images=True)
    shapes = [[(40, 30)], [(64, 48), (32, 32)]]
    for n, sizes in enumerate(shapes):
        vote = make_vote(a, b, "model_a" if n else "model_b", images=len(sizes))
        for position, (width, height) in enumerate(sizes):
            data = png_bytes(width, height) if position else jpeg_with_exif(width, height)
            image = image_upload(session_key="s" * 32, upload=io.BytesIO(data))
            PromptImage.objects.filter(pk=image.pk).update(
                battle=vote.battle, prompt=vote.battle.prompt, position=position
            )
    make_vote(a, b, "model_a")  # a text battle: not in this format
    folder = tmp_path / "vision"
    call_command(
        "export_votes", "--format=trl-vision", f"-o={folder}/", "--parquet", stderr=StringIO()
    )
    out = tmp_path / "result.json"
    done = subprocess.run(
        [str(TRAINERS_PYTHON), str(SCRIPT), "--data", str(folder), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["rows"] == 2
    assert result["features"].startswith("List(Image(")
    assert result["image_sizes"] == [[list(s) for s in sizes] for sizes in shapes]
    assert result["vision_dataset"] is True
    # Three images, each once for the chosen and once for the rejected sequence.
    assert result["pixel_values"][0] == 6
    assert result["grad_norm"] > 0
