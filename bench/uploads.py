"""The cost of checking an uploaded image, against Pillow's plain open and save of the same file.

For a few images of real sizes, built at run time (a 12-megapixel camera JPEG, a phone photo, a
1080p screenshot PNG, a WebP): ``arena.live.images.image_validate`` (identify by content, pixel
and aspect-ratio limits, ``verify``, a full decode, EXIF orientation, metadata stripped,
re-encoded within the byte limit) timed ``--repeat`` times each, against the anchor in the same
run: ``Image.open`` then ``save`` to the same output format with nothing checked. Printed:
median and p99 per image in milliseconds, and the ratio of the medians (validation / anchor).
No database: only the function is timed.

Then the hostile uploads an attacker who has read the docs sends (a 5000x5000 black PNG of a
few tens of kilobytes, colour noise as a quality-20 JPEG that re-encodes to several times its
size, noise as a PNG, a 25,000,000x1 strip), each with the settings' limits: what became of it
(stored, or refused and why) and the web worker thread's CPU time (``time.thread_time``), against
the same anchor's CPU time. Last, the CPU time of a black PNG and a noise JPEG per megapixel with
the limits lifted: what ``ARENA_IMAGE_MAX_PIXELS`` and ``ARENA_IMAGE_CPU_SECONDS`` are chosen by.

    .venv/bin/python bench/uploads.py [--repeat 30] [--hostile-repeat 5]
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

from django.conf import settings  # noqa: E402
from PIL import Image  # noqa: E402

from arena.errors import ArenaError  # noqa: E402
from arena.live.images import ImageLimits, image_validate  # noqa: E402

MAX_PIXELS = 25_000_000  # the honest images above are all under it


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


def noise_rgb(width: int, height: int, mode: str = "RGB") -> Image.Image:
    """Independent random bytes in every channel: nothing to compress."""
    return Image.frombytes(mode, (width, height), os.urandom(width * height * len(mode)))


def hostile() -> list[tuple[str, bytes]]:
    return [
        ("black PNG 5000x5000", encoded(Image.new("RGB", (5000, 5000)), "PNG")),
        ("black PNG 4000x4000", encoded(Image.new("RGB", (4000, 4000)), "PNG")),
        ("noise JPEG q20 5000x5000", encoded(noise_rgb(5000, 5000), "JPEG", quality=20)),
        ("noise JPEG q20 4000x4000", encoded(noise_rgb(4000, 4000), "JPEG", quality=20)),
        ("noise PNG 1800x1800", encoded(noise_rgb(1800, 1800), "PNG")),
        ("noise RGBA PNG 1500x1500", encoded(noise_rgb(1500, 1500, "RGBA"), "PNG")),
        ("black PNG 25000000x1", encoded(Image.new("RGB", (25_000_000, 1)), "PNG")),
    ]


def cpu_timed(run: Callable[[], object], repeat: int) -> list[float]:
    """The calling thread's CPU time of each run, in ms (the first run warms the codecs)."""
    run()
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        run()
        times.append((time.thread_time() - started) * 1000)
    return times


def outcome(data: bytes, limits: ImageLimits) -> str:
    try:
        clean = image_validate(data=data, limits=limits)
    except ArenaError as error:
        setting = error.message.rsplit("(", 1)[-1].split(")", 1)[0]
        return f"refused {error.status} {setting}"
    return f"stored {clean.mime[6:]} {len(clean.data)}"


def validated(data: bytes, limits: ImageLimits) -> None:
    try:
        image_validate(data=data, limits=limits)
    except ArenaError:
        pass


def hostile_table(repeat: int) -> None:
    limits = ImageLimits.from_settings()
    print()
    print(
        f"Hostile uploads, limits as configured: {limits.max_bytes} bytes, "
        f"{limits.max_pixels} pixels, aspect {limits.max_aspect_ratio}, "
        f"{limits.cpu_seconds:g} s CPU; {repeat} runs each, thread CPU time in ms"
    )
    header = f"{'upload':<26} {'bytes':>9} {'outcome':<42} {'validate med':>12} {'max':>7}"
    header += f" {'anchor med':>10} {'ratio':>6}"
    print(header)
    for name, data in hostile():
        checked = cpu_timed(lambda d=data: validated(d, limits), repeat)
        plain = cpu_timed(lambda d=data: anchor(d), repeat)
        ratio = statistics.median(checked) / statistics.median(plain)
        print(
            f"{name:<26} {len(data):>9} {outcome(data, limits):<42} "
            f"{statistics.median(checked):>12.1f} {max(checked):>7.1f} "
            f"{statistics.median(plain):>10.1f} {ratio:>6.2f}"
        )


def megapixel_table(repeat: int) -> None:
    """Validation's CPU time by size with the pixel and CPU limits lifted."""
    lifted = ImageLimits(
        max_bytes=100 * 1024 * 1024, max_pixels=100_000_000, max_aspect_ratio=20, cpu_seconds=60
    )
    print()
    print(f"CPU time by size, limits lifted; {repeat} runs each, median ms")
    print(f"{'megapixels':>10} {'black PNG':>10} {'noise JPEG q20':>15}")
    for side in (2000, 2828, 3464, 4000, 4472, 5000):
        black = encoded(Image.new("RGB", (side, side)), "PNG")
        noise = encoded(noise_rgb(side, side), "JPEG", quality=20)
        cells = [
            statistics.median(cpu_timed(lambda d=d: validated(d, lifted), repeat))
            for d in (black, noise)
        ]
        print(f"{side * side / 1e6:>10.0f} {cells[0]:>10.1f} {cells[1]:>15.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--hostile-repeat", type=int, default=5)
    args = parser.parse_args()
    # The honest images' cost of the checks, whatever the CPU budget would have said.
    limits = ImageLimits(
        max_bytes=settings.ARENA_IMAGE_MAX_BYTES,
        max_pixels=MAX_PIXELS,
        max_aspect_ratio=settings.ARENA_IMAGE_MAX_ASPECT_RATIO,
        cpu_seconds=60,
    )
    print(f"Pillow {Image.__version__}, {args.repeat} runs per image, times in ms")
    header = f"{'image':<26} {'bytes':>10} {'validate med':>13} {'p99':>8}"
    header += f" {'anchor med':>11} {'p99':>8} {'ratio':>6}"
    print(header)
    for name, data in samples():
        checked = timed(lambda d=data: validated(d, limits), args.repeat)
        plain = timed(lambda d=data: anchor(d), args.repeat)
        ratio = statistics.median(checked) / statistics.median(plain)
        print(
            f"{name:<26} {len(data):>10} {statistics.median(checked):>13.1f} "
            f"{p99(checked):>8.1f} {statistics.median(plain):>11.1f} {p99(plain):>8.1f} "
            f"{ratio:>6.2f}"
        )
    hostile_table(args.hostile_repeat)
    megapixel_table(args.hostile_repeat)


if __name__ == "__main__":
    main()
