"""Images built at test time for the upload tests (no binary fixtures in the repository)."""

import io
import random

from PIL import Image


def png_bytes(width: int = 64, height: int = 48, *, mode: str = "RGB") -> bytes:
    image = Image.new(mode, (width, height), (200, 30, 60) if mode == "RGB" else None)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def jpeg_with_exif(width: int = 80, height: int = 60) -> bytes:
    """A JPEG whose EXIF holds a camera make and GPS-like text."""
    image = Image.new("RGB", (width, height), (10, 120, 240))
    exif = Image.Exif()
    exif[0x010F] = "SecretCamera"  # Make
    exif[0x0131] = "WhereIWas 51.5N"  # Software, standing in for anything identifying
    out = io.BytesIO()
    image.save(out, format="JPEG", exif=exif.tobytes())
    return out.getvalue()


def bomb_png(side: int = 12_000) -> bytes:
    """A small file that decodes to side x side pixels: a decompression bomb (1-bit, so the
    file stays a few kilobytes)."""
    image = Image.new("1", (side, side), 0)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def noisy_png() -> bytes:
    """A PNG of noise, so its compressed data is long enough to cut or spoil in the middle."""
    noisy = Image.effect_noise((300, 200), 80).convert("RGB")
    out = io.BytesIO()
    noisy.save(out, format="PNG")
    return out.getvalue()


def corrupt_png() -> bytes:
    """``noisy_png`` with 64 bytes inside its image data overwritten: its checksum fails."""
    whole = bytearray(noisy_png())
    middle = len(whole) // 2
    whole[middle : middle + 64] = b"\xff" * 64
    return bytes(whole)


def noise_jpeg(width: int, height: int, *, quality: int = 20, seed: int = 1) -> bytes:
    """Colour noise as a low-quality JPEG: a small file whose re-encoding at the stored quality
    is several times larger."""
    pixels = random.Random(seed).randbytes(width * height * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def noise_png(width: int, height: int, *, mode: str = "RGB", seed: int = 1) -> bytes:
    """Noise as a PNG: as large as its pixels, and slow to compress again."""
    pixels = random.Random(seed).randbytes(width * height * len(mode))
    out = io.BytesIO()
    Image.frombytes(mode, (width, height), pixels).save(out, format="PNG")
    return out.getvalue()


def palette_noise_png(width: int, height: int, *, seed: int = 1) -> bytes:
    """Noise in 256 colours with a transparent one: a byte a pixel here, four once re-encoded
    as RGBA."""
    rng = random.Random(seed)
    image = Image.frombytes("P", (width, height), rng.randbytes(width * height))
    image.putpalette(rng.randbytes(256 * 3))
    image.info["transparency"] = 0
    out = io.BytesIO()
    image.save(out, format="PNG", transparency=0)
    return out.getvalue()


def zero_png(width: int, height: int) -> bytes:
    """Black RGB pixels: a few tens of kilobytes for millions of pixels."""
    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, format="PNG")
    return out.getvalue()
