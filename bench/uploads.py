"""The cost of checking an uploaded image, against Pillow's plain open and save of the same file.

For a few images of real sizes, built at run time (a 12-megapixel camera JPEG, a phone photo, a
1080p screenshot PNG, a WebP): ``arena.live.images.image_validate`` (identify by content, pixel
limit, ``verify``, a full decode, EXIF orientation, metadata stripped, re-encoded) timed
``--repeat`` times each, against the anchor in the same run: ``Image.open`` then ``save`` to the
same output format with nothing checked. Printed: median and p99 per image in milliseconds, and
the ratio of the medians (validation / anchor). No database: only the function is timed.

    .venv/bin/python bench/uploads.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")

import django  # noqa: E402

django.setup()

from PIL import Image  # noqa: E402

from arena.live.images import image_validate  # noqa: E402

MAX_PIXELS = 25_000_000


def photo(width: int, height: int) -> Image.Image:
    """Noise over a gradient: compresses like a photograph, not like a flat colour."""
    noise = Image.effect_noise((width, height), 40).convert("L")
    gradient = Image.linear_gradient("L").resize((width, height))
    return Image.merge("RGB", (noise, gradient, Image.blend(noise, gradient, 0.5)))


def encoded(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def samples() -> list[tuple[str, bytes]]:
    exif = Image.Exif()
    exif[0x010F] = "Camera"
    exif[0x0112] = 6  # rotated: the validation turns it upright
    return [
        ("camera JPEG 4000x3000", encoded(photo(4000, 3000), "JPEG", quality=90, exif=exif)),
        ("phone JPEG 1080x1920", encoded(photo(1080, 1920), "JPEG", quality=85)),
        ("screenshot PNG 1920x1080", encoded(photo(1920, 1080).quantize(64).convert("RGB"), "PNG")),
        ("WebP 1600x1200", encoded(photo(1600, 1200), "WEBP", quality=80)),
    ]


def anchor(data: bytes) -> None:
    """Pillow's plain open and save, to the format the validation writes."""
    image = Image.open(io.BytesIO(data))
    out = io.BytesIO()
    if image.format in ("PNG", "GIF"):
        image.save(out, format="PNG")
    else:
        image.convert("RGB").save(out, format="JPEG", quality=90)


def timed(run: Callable[[], object], repeat: int) -> list[float]:
    run()  # warm: the codecs' first use
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return times


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(f"Pillow {Image.__version__}, {args.repeat} runs per image, times in ms")
    header = f"{'image':<26} {'bytes':>10} {'validate med':>13} {'p99':>8}"
    header += f" {'anchor med':>11} {'p99':>8} {'ratio':>6}"
    print(header)
    for name, data in samples():
        validated = timed(lambda d=data: image_validate(data=d, max_pixels=MAX_PIXELS), args.repeat)
        plain = timed(lambda d=data: anchor(d), args.repeat)
        ratio = statistics.median(validated) / statistics.median(plain)
        print(
            f"{name:<26} {len(data):>10} {statistics.median(validated):>13.1f} "
            f"{p99(validated):>8.1f} {statistics.median(plain):>11.1f} {p99(plain):>8.1f} "
            f"{ratio:>6.2f}"
        )


if __name__ == "__main__":
    main()
