"""Images built at test time for the upload tests (no binary fixtures in the repository)."""

import io

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
