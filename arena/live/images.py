"""Images in live prompts: validated, stripped and re-encoded before anything is stored.

An upload (``image_upload``) is refused, naming the limit, unless all of these hold, checked in
this order and before a byte is written:

- at most ``ARENA_IMAGE_MAX_BYTES`` bytes (413 request_too_large);
- within today's quotas of unattached bytes, per session and per address (429 image_quota;
  checked before decoding and counted once the stored size is known);
- an image by its content, as Pillow identifies it (PNG, JPEG, WebP or GIF), whatever its
  name says (400 invalid_file);
- at most ``ARENA_IMAGE_MAX_PIXELS`` pixels (width x height) and ``ARENA_IMAGE_MAX_ASPECT_RATIO``
  (the longer side over the shorter), both read from the header before any decoding; Pillow's
  own decompression-bomb guard is turned into the same refusal;
- whole: Pillow's ``verify`` and then a full decode (``load``) succeed, so a truncated or
  corrupt file is refused rather than half-read;
- checked and re-encoded within ``ARENA_IMAGE_CPU_SECONDS`` of the worker thread's CPU time
  (``arena.cpu_budget``: checked at each step and at each chunk a codec reads or writes);
- at most ``ARENA_IMAGE_MAX_BYTES`` bytes once re-encoded (413 request_too_large).

The pixels are then re-encoded into a new file that carries none of the original's metadata
(EXIF, GPS, ICC profiles, text chunks): turned upright by its EXIF orientation first, then PNG
for an image with transparency or from a lossless format (unless photo-like), JPEG otherwise,
at lower qualities while it is over the byte limit (``_reencoded``). That file is stored
through Django's storage API (``STORAGES["default"]``) under a random name, with a row
(``PromptImage``) holding its owner's session hash, SHA-256, size, mime type and dimensions.

A battle takes the images by id with its first turn (``images_for_prompt``): the uploading
session's own, not yet in any battle. An image no battle took within
``UNATTACHED_IMAGE_MINUTES`` is deleted, file and row (``prompt_images_sweep``, a beat task
every quarter hour), so an abandoned upload is gone within the hour.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from arena.cpu_budget import BudgetedBytesIO, CpuBudget, CpuBudgetExceeded
from arena.errors import ArenaError, ErrorCode
from arena.identity import session_hash, session_hash_matches
from arena.live import image_quotas
from arena.live.image_quotas import images_quota_give_back as images_quota_give_back
from arena.models import PromptImage

# The formats a visitor may send, as Pillow names them; anything else is refused by content.
ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
_LOSSLESS = {"PNG", "GIF"}
JPEG_QUALITY = 90
# Tried in turn, after the source's own tables, while the JPEG is over ARENA_IMAGE_MAX_BYTES.
JPEG_FALLBACK_QUALITIES = (60, 35)
# zlib's fast strategy: about half the CPU of the default (6) for a few percent more bytes.
PNG_COMPRESS_LEVEL = 3
# A lossless file over a byte a pixel holds photo-like pixels: stored as JPEG.
PHOTO_BYTES_PER_PIXEL = 1.0
# The part of the CPU budget an opaque image's PNG may take; the rest is the JPEG's, instead.
PNG_BUDGET_SHARE = 0.6
FIELD = "image"
# With the sweep every quarter hour (config.schedule), an unattached upload lasts under an hour.
UNATTACHED_IMAGE_MINUTES = 40


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


def _too_large(max_bytes: int) -> ArenaError:
    return ArenaError(
        ErrorCode.REQUEST_TOO_LARGE,
        gettext("The image is larger than %(limit)s bytes (ARENA_IMAGE_MAX_BYTES).")
        % {"limit": max_bytes},
        status=413,
        field=FIELD,
    )


def _read_bounded(upload: IO[bytes], max_bytes: int) -> bytes:
    data = upload.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _too_large(max_bytes)
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


def _too_costly(seconds: float) -> ArenaError:
    return _refused(
        gettext(
            "The image takes more than %(limit)s s of the server's time to check "
            "(ARENA_IMAGE_CPU_SECONDS); send a smaller image, or a JPEG."
        )
        % {"limit": f"{seconds:g}"}
    )


def _open(data: bytes, limits: ImageLimits, budget: CpuBudget) -> Image.Image:
    """The image, opened lazily (header only) from its content, never its name; refused on its
    header's size (pixels, aspect ratio) before a pixel is decoded."""
    try:
        with warnings.catch_warnings():
            # Pillow warns past its own pixel limit and raises past twice that: both refused.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(BudgetedBytesIO(data, budget=budget), formats=ACCEPTED_FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _bomb(limits.max_pixels) from None
    except UnidentifiedImageError:
        raise _refused(
            gettext("The file is not a PNG, JPEG, WebP or GIF image (judged by its content).")
        ) from None
    except (OSError, SyntaxError, ValueError):
        raise _refused(gettext("The image is corrupt or truncated.")) from None
    width, height = image.size
    if width * height > limits.max_pixels:
        raise _bomb(limits.max_pixels)
    if max(width, height) > limits.max_aspect_ratio * min(width, height):
        raise _refused(
            gettext(
                "The image is more than %(ratio)s times as long as it is wide "
                "(ARENA_IMAGE_MAX_ASPECT_RATIO)."
            )
            % {"ratio": limits.max_aspect_ratio}
        )
    return image


@dataclass(frozen=True)
class ImageLimits:
    """What an upload may be and cost; ``from_settings`` reads the ARENA_IMAGE_* settings."""

    max_bytes: int
    max_pixels: int
    max_aspect_ratio: int
    cpu_seconds: float

    @classmethod
    def from_settings(cls, *, max_pixels: int | None = None) -> ImageLimits:
        return cls(
            max_bytes=settings.ARENA_IMAGE_MAX_BYTES,
            max_pixels=settings.ARENA_IMAGE_MAX_PIXELS if max_pixels is None else max_pixels,
            max_aspect_ratio=settings.ARENA_IMAGE_MAX_ASPECT_RATIO,
            cpu_seconds=settings.ARENA_IMAGE_CPU_SECONDS,
        )


def image_validate(
    *, data: bytes, max_pixels: int | None = None, limits: ImageLimits | None = None
) -> CleanImage:
    """``data`` checked and re-encoded without metadata, or an ``ArenaError`` naming why not.

    ``limits`` defaults to the settings' (``max_pixels`` overriding their pixel limit); the
    whole check runs within ``limits.cpu_seconds`` of this thread's CPU time."""
    limits = limits or ImageLimits.from_settings(max_pixels=max_pixels)
    budget = CpuBudget(limits.cpu_seconds)
    try:
        return _validated(data, limits, budget)
    except CpuBudgetExceeded:
        raise _too_costly(limits.cpu_seconds) from None


def _validated(data: bytes, limits: ImageLimits, budget: CpuBudget) -> CleanImage:
    image = _open(data, limits, budget)
    source_format = image.format or ""
    try:
        image.verify()  # structure and checksums; the image cannot be used after it
        image = Image.open(BudgetedBytesIO(data, budget=budget), formats=ACCEPTED_FORMATS)
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image.load()  # every pixel decoded: a truncated file fails here
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _bomb(limits.max_pixels) from None
    except (OSError, SyntaxError, ValueError, EOFError):
        raise _refused(gettext("The image is corrupt or truncated.")) from None
    try:
        clean, mime, extension, data = _reencoded(
            image, source_format, source_size=len(data), limits=limits, budget=budget
        )
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


def _plain(image: Image.Image, mode: str) -> Image.Image:
    """``image`` in ``mode`` (itself when it is in it already: a copy costs a pass over every
    pixel), with none of the original's info to write again."""
    plain = image if image.mode == mode else image.convert(mode)
    plain.info = {}
    return plain


def _encoded(
    image: Image.Image, fmt: str, budget: CpuBudget, until: float | None, **options: Any
) -> bytes:
    out = BudgetedBytesIO(budget=budget, until=until)
    image.save(out, format=fmt, **options)
    return out.getvalue()


def _reencoded(
    image: Image.Image,
    source_format: str,
    *,
    source_size: int,
    limits: ImageLimits,
    budget: CpuBudget,
) -> tuple[Image.Image, str, str, bytes]:
    """The pixels, upright, in a new PNG or JPEG file holding none of the original's metadata
    and at most ``limits.max_bytes`` long: the image, its mime type, its extension and the
    file's bytes.

    PNG for an image with transparency (refused with a 413 when it does not fit), and for one
    from a lossless format unless its file is photo-like (more than ``PHOTO_BYTES_PER_PIXEL``):
    such pixels are as large and slow to compress again as PNG, and go to JPEG. An opaque PNG
    that takes more than ``PNG_BUDGET_SHARE`` of the budget, or does not fit, goes to JPEG too.
    JPEG at ``JPEG_QUALITY`` first, then the source's own quantization tables (a low-quality
    JPEG stays about its own size), then lower qualities, until one fits."""
    budget.check()
    orientation = image.getexif().get(ExifTags.Base.Orientation, 1)
    upright = (ImageOps.exif_transpose(image) or image) if orientation != 1 else image
    budget.check()
    transparent = upright.mode in ("RGBA", "LA", "PA") or (
        upright.mode == "P" and "transparency" in upright.info
    )
    photo_like = source_size > PHOTO_BYTES_PER_PIXEL * upright.width * upright.height
    if transparent or (source_format in _LOSSLESS and not photo_like):
        clean = _plain(upright, "RGBA" if transparent else "RGB")
        try:
            data = _encoded(
                clean,
                "PNG",
                budget,
                None if transparent else budget.at(PNG_BUDGET_SHARE),
                compress_level=PNG_COMPRESS_LEVEL,
            )
        except CpuBudgetExceeded:
            if transparent:
                raise
        else:
            if len(data) <= limits.max_bytes:
                return clean, "image/png", ".png", data
            if transparent:
                raise _too_large(limits.max_bytes)
    else:
        clean = _plain(upright, "RGB")
    tries: list[dict[str, Any]] = [{"quality": JPEG_QUALITY}]
    tables = getattr(image, "quantization", None)
    if source_format == "JPEG" and tables:
        ordered = [tables[key] for key in sorted(tables)]
        # A greyscale JPEG has one table; the colour file written here needs one for chroma.
        tries.append({"qtables": ordered * 2 if len(ordered) == 1 else ordered})
    tries += [{"quality": quality} for quality in JPEG_FALLBACK_QUALITIES]
    for options in tries:
        data = _encoded(clean, "JPEG", budget, None, **options)
        if len(data) <= limits.max_bytes:
            return clean, "image/jpeg", ".jpg", data
    raise _too_large(limits.max_bytes)


def image_upload(
    *, session_key: str, upload: IO[bytes] | None, client_ip: str | None = None
) -> PromptImage:
    """Validate ``upload`` and store it as the session's image; nothing is stored if refused.

    Its stored bytes count against today's quotas of unattached bytes until a battle takes it
    (``images_quota_give_back``)."""
    if not session_key:
        raise ArenaError(ErrorCode.NO_SESSION, gettext("Open the battle page first."), status=403)
    if upload is None:
        raise _refused(gettext("Attach an image file (multipart field image)."))
    data = _read_bounded(upload, settings.ARENA_IMAGE_MAX_BYTES)
    quotas = image_quotas.quotas_for(session_key=session_key, ip=client_ip)
    image_quotas.quotas_check(quotas, size=1)  # a quota spent already costs no decoding
    clean = image_validate(data=data)
    counted = image_quotas.quotas_check(quotas, size=len(clean.data), take=True)
    image = PromptImage(
        session_hash=session_hash(session_key),
        sha256=hashlib.sha256(clean.data).hexdigest(),
        mime=clean.mime,
        width=clean.width,
        height=clean.height,
        size=len(clean.data),
    )
    # The file first, then the row; a row that fails to save takes its file with it, and
    # nothing stored gives its count back.
    try:
        image.file.save(f"image{clean.extension}", ContentFile(clean.data), save=False)
        try:
            with transaction.atomic():
                image.save()
        except BaseException:
            image.file.delete(save=False)
            raise
    except BaseException:
        image_quotas.counters_give_back(counted, len(clean.data))
        raise
    image_quotas.quotas_hold(image.pk, counted)
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
    """Delete the images no battle took within ``UNATTACHED_IMAGE_MINUTES`` of their upload
    (the file, then the row); returns how many. A rerun finds nothing more to delete."""
    cutoff = (now or timezone.now()) - timedelta(minutes=UNATTACHED_IMAGE_MINUTES)
    deleted = 0
    unattached = {"battle__isnull": True, "prompt__isnull": True}  # a pool prompt's stays
    for image in PromptImage.objects.filter(created_at__lt=cutoff, **unattached):
        image.file.delete(save=False)
        # Only while still unattached: a battle that took it meanwhile keeps its row.
        deleted += PromptImage.objects.filter(pk=image.pk, **unattached).delete()[0]
    return deleted
