"""Images in live prompts: validated, stripped and re-encoded before anything is stored.

An upload (``image_upload``) is refused, naming the limit, unless all of these hold, checked in
this order and before a byte is written:

- at most ``ARENA_IMAGE_MAX_BYTES`` bytes (413 request_too_large);
- an image by its content, as Pillow identifies it (PNG, JPEG, WebP or GIF), whatever its
  name says (400 invalid_file);
- at most ``ARENA_IMAGE_MAX_PIXELS`` pixels (width x height, read from the header before any
  decoding); Pillow's own decompression-bomb guard is turned into the same refusal;
- whole: Pillow's ``verify`` and then a full decode (``load``) succeed, so a truncated or
  corrupt file is refused rather than half-read.

The pixels are then re-encoded into a new file that carries none of the original's metadata
(EXIF, GPS, ICC profiles, text chunks): turned upright by its EXIF orientation first, then PNG
for an image with transparency or from a lossless format, JPEG otherwise. That file is stored
through Django's storage API (``STORAGES["default"]``) under a random name, with a row
(``PromptImage``) holding its owner's session hash, SHA-256, size, mime type and dimensions.

A battle takes the images by id with its first turn (``images_for_prompt``): the uploading
session's own, not yet in any battle. An image no battle took within
``UNATTACHED_IMAGE_HOURS`` is deleted, file and row (``prompt_images_sweep``, an hourly beat
task), so abandoned uploads do not pile up.
"""

from __future__ import annotations

import base64
import hashlib
import io
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext
from PIL import Image, ImageOps, UnidentifiedImageError

from arena.errors import ArenaError, ErrorCode
from arena.identity import session_hash, session_hash_matches
from arena.models import PromptImage

# The formats a visitor may send, as Pillow names them; anything else is refused by content.
ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
_LOSSLESS = {"PNG", "GIF"}
JPEG_QUALITY = 90
FIELD = "image"
UNATTACHED_IMAGE_HOURS = 24


@dataclass(frozen=True)
class CleanImage:
    """An upload after validation: the re-encoded bytes and what the row records."""

    data: bytes
    mime: str
    extension: str
    width: int
    height: int


def _refused(message: str) -> ArenaError:
    return ArenaError(ErrorCode.INVALID_FILE, message, field=FIELD)


def _read_bounded(upload: IO[bytes], max_bytes: int) -> bytes:
    data = upload.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ArenaError(
            ErrorCode.REQUEST_TOO_LARGE,
            gettext("The image is larger than %(limit)s bytes (ARENA_IMAGE_MAX_BYTES).")
            % {"limit": max_bytes},
            status=413,
            field=FIELD,
        )
    if not data:
        raise _refused(gettext("The image is empty."))
    return data


def _bomb(max_pixels: int) -> ArenaError:
    return _refused(
        gettext(
            "The image has more than %(limit)s pixels (ARENA_IMAGE_MAX_PIXELS); it may be a "
            "decompression bomb, and is refused."
        )
        % {"limit": max_pixels}
    )


def _open(data: bytes, max_pixels: int) -> Image.Image:
    """The image, opened lazily (header only) from its content, never its name."""
    try:
        with warnings.catch_warnings():
            # Pillow warns past its own pixel limit and raises past twice that: both refused.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _bomb(max_pixels) from None
    except UnidentifiedImageError:
        raise _refused(
            gettext("The file is not a PNG, JPEG, WebP or GIF image (judged by its content).")
        ) from None
    except (OSError, SyntaxError, ValueError):
        raise _refused(gettext("The image is corrupt or truncated.")) from None
    width, height = image.size
    if width * height > max_pixels:
        raise _bomb(max_pixels)
    return image


def image_validate(*, data: bytes, max_pixels: int) -> CleanImage:
    """``data`` checked and re-encoded without metadata, or an ``ArenaError`` naming why not."""
    image = _open(data, max_pixels)
    source_format = image.format or ""
    try:
        image.verify()  # structure and checksums; the image cannot be used after it
        image = Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS)
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image.load()  # every pixel decoded: a truncated file fails here
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _bomb(max_pixels) from None
    except (OSError, SyntaxError, ValueError, EOFError):
        raise _refused(gettext("The image is corrupt or truncated.")) from None
    try:
        clean, mime, extension, data = _reencoded(image, source_format)
    except (OSError, ValueError, SyntaxError):
        # A file that decodes but whose EXIF or pixels cannot be turned into a plain image.
        raise _refused(gettext("The image is corrupt or truncated.")) from None
    return CleanImage(
        data=data,
        mime=mime,
        extension=extension,
        width=clean.width,
        height=clean.height,
    )


def _reencoded(image: Image.Image, source_format: str) -> tuple[Image.Image, str, str, bytes]:
    """The pixels, upright, in a new PNG or JPEG file holding none of the original's metadata:
    the image, its mime type, its extension and the file's bytes."""
    upright = ImageOps.exif_transpose(image) or image
    transparent = upright.mode in ("RGBA", "LA", "PA") or (
        upright.mode == "P" and "transparency" in upright.info
    )
    out = io.BytesIO()
    if transparent or source_format in _LOSSLESS:
        clean = upright.convert("RGBA" if transparent else "RGB")
        clean.info = {}  # nothing of the original's chunks is written again
        clean.save(out, format="PNG", optimize=False)
        return clean, "image/png", ".png", out.getvalue()
    clean = upright.convert("RGB")
    clean.info = {}
    clean.save(out, format="JPEG", quality=JPEG_QUALITY)
    return clean, "image/jpeg", ".jpg", out.getvalue()


def image_upload(*, session_key: str, upload: IO[bytes] | None) -> PromptImage:
    """Validate ``upload`` and store it as the session's image; nothing is stored if refused."""
    if not session_key:
        raise ArenaError(ErrorCode.NO_SESSION, gettext("Open the battle page first."), status=403)
    if upload is None:
        raise _refused(gettext("Attach an image file (multipart field image)."))
    data = _read_bounded(upload, settings.ARENA_IMAGE_MAX_BYTES)
    clean = image_validate(data=data, max_pixels=settings.ARENA_IMAGE_MAX_PIXELS)
    image = PromptImage(
        session_hash=session_hash(session_key),
        sha256=hashlib.sha256(clean.data).hexdigest(),
        mime=clean.mime,
        width=clean.width,
        height=clean.height,
        size=len(clean.data),
    )
    # The file first, then the row; a row that fails to save takes its file with it.
    image.file.save(f"image{clean.extension}", ContentFile(clean.data), save=False)
    try:
        with transaction.atomic():
            image.save()
    except BaseException:
        image.file.delete(save=False)
        raise
    return image


def images_for_prompt(*, image_ids: object, session_key: str) -> list[PromptImage]:
    """The session's unattached images named by ``image_ids`` (a list of ids), in that order;
    an empty list for none. Another session's image, or one in a battle already, is unknown."""
    if image_ids is None or image_ids == []:
        return []
    limit = settings.ARENA_IMAGE_MAX_PER_PROMPT
    if not isinstance(image_ids, list) or not all(isinstance(i, str) for i in image_ids):
        raise ArenaError(
            ErrorCode.INVALID, gettext("images is a list of image ids."), field="images"
        )
    if len(image_ids) > limit:
        raise ArenaError(
            ErrorCode.INVALID,
            gettext("A prompt has at most %(limit)s images (ARENA_IMAGE_MAX_PER_PROMPT).")
            % {"limit": limit},
            field="images",
        )
    if len(set(image_ids)) != len(image_ids):
        raise ArenaError(ErrorCode.INVALID, gettext("An image is named twice."), field="images")
    ids = []
    for raw in image_ids:
        try:
            ids.append(_image_pk(raw))
        except ValueError:
            raise _unknown_image() from None
    unattached = PromptImage.objects.filter(pk__in=ids, battle__isnull=True, prompt__isnull=True)
    found = {i.pk: i for i in unattached}
    images = [found.get(pk) for pk in ids]
    if any(i is None or not session_hash_matches(i.session_hash, session_key) for i in images):
        raise _unknown_image()
    return [i for i in images if i is not None]


def _image_pk(raw: str) -> uuid.UUID:
    return uuid.UUID(raw)


def _unknown_image() -> ArenaError:
    return ArenaError(
        ErrorCode.INVALID,
        gettext("Unknown image, or one sent with another prompt already; attach it again."),
        field="images",
    )


def image_data_url(image: PromptImage) -> str:
    """The stored image as a data URL, as an OpenAI image_url content part takes it."""
    with image.file.open("rb") as stored:
        encoded = base64.b64encode(stored.read()).decode("ascii")
    return f"data:{image.mime};base64,{encoded}"


def image_stored(*, image_id: uuid.UUID) -> tuple[PromptImage, bytes] | None:
    """An image's row and stored bytes; None when there is none."""
    image = PromptImage.objects.filter(pk=image_id).first()
    if image is None:
        return None
    try:
        with image.file.open("rb") as stored:
            return image, stored.read()
    except FileNotFoundError:
        return None


def prompt_images_sweep(*, now: datetime | None = None) -> int:
    """Delete the images no battle took within ``UNATTACHED_IMAGE_HOURS`` of their upload (the
    file, then the row); returns how many. A rerun finds nothing more to delete."""
    cutoff = (now or timezone.now()) - timedelta(hours=UNATTACHED_IMAGE_HOURS)
    deleted = 0
    unattached = {"battle__isnull": True, "prompt__isnull": True}  # a pool prompt's stays
    for image in PromptImage.objects.filter(created_at__lt=cutoff, **unattached):
        image.file.delete(save=False)
        # Only while still unattached: a battle that took it meanwhile keeps its row.
        deleted += PromptImage.objects.filter(pk=image.pk, **unattached).delete()[0]
    return deleted
