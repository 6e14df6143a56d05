"""Importing a pool of prompts and completions from a JSONL file.

Why one module: an import is one check-then-write pass over the file's lines, and its parts
(the line parser, the image reader, the prompt-id conflicts and the write) share the line type
and the rule that nothing is written unless every line is good; split, each would re-state it.

Each line is a JSON object::

    {"prompt": ["first user turn", "second user turn"],   # or one string
     "model": "my-model-7b",                               # slug of the answering model
     "completion": ["first answer", "second answer"],      # or one string; as many turns as prompt
     "category": "coding",                                 # optional; one of PROMPT_CATEGORIES
     "language": "en",                                     # optional (default en); a language tag
     "prompt_id": "q-17",                                  # optional; groups lines on one prompt
     "images": ["cat.jpg", "https://host/dog.png"]}        # optional; the first turn's images

Every line is checked before anything is written; every malformed line is reported with its
1-based line number and nothing of the file is imported. Unknown models are registered as
pool-only models.

``images`` (or ``image``, one reference) are the prompt's images, sent with its first turn: a
path under the file's folder (or the folder ``--images-root`` names; nothing outside it, by
``..``, an absolute path or a symlink, is read), or an http(s) URL fetched at import time through
the guarded client (``arena.outbound``: no loopback, private or metadata address unless
``--images-allow-host`` names it). Each is copied in
through the same checks as a visitor's upload (``arena.live.images.image_validate``: type by
content, size and pixel limits, decompression bombs, corruption), its metadata stripped and
re-encoded, before anything is written; a bad image is reported with its line like any other
problem. A reference named on several lines (one line per model's answer) is read once. The
images are part of the prompt's identity: the same text with other images is another prompt.

Several lines may give one model's answers to one prompt with different texts: each is a
variant, and a pool battle shows one of them, drawn uniformly (``arena.pool_cache``), so that
knowing one published answer does not tell which model wrote the one on screen. A line
repeating a stored text adds nothing; an import never changes or removes a stored variant.
"""

import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils.text import slugify

from arena.errors import ArenaError, ErrorCode
from arena.inputs import text_problem
from arena.live.images import CleanImage, image_validate
from arena.models import (
    MODEL_SLUG_MAX,
    ArenaModel,
    Completion,
    Prompt,
    PromptImage,
    completion_turns_hash,
)
from arena.outbound import (
    OutboundFailed,
    OutboundPolicy,
    OutboundRefused,
    outbound_request,
    url_shown,
)
from arena.pool_cache import generation_bumps_deferred

# The prompt categories a pool may use: MT-bench's eight (the demo pool's), and ``other``. The
# leaderboard's *coding* view selects the ``coding`` category. Stored in lower case.
PROMPT_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
    "other",
)
# A BCP 47 language tag's common shape: a language (2-3 letters), an optional script (4 letters)
# and an optional region (2 letters or 3 digits), e.g. en, en-US, zh-Hant, zh-Hant-TW, es-419.
_LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z]{4})?(-(?:[A-Za-z]{2}|[0-9]{3}))?")
MAX_REPORTED_LINES = 50

_T = TypeVar("_T")


class Progress(Protocol):
    """Wraps a long step's items to show progress (a terminal's bar, or nothing)."""

    def __call__(self, items: Sequence[_T], /, *, desc: str) -> Iterable[_T]: ...


def no_progress(items: Sequence[_T], /, *, desc: str) -> Iterable[_T]:
    return items


@dataclass(frozen=True)
class PoolLine:
    line_no: int
    prompt: tuple[str, ...]
    model: str
    completion: tuple[str, ...]
    category: str
    language: str
    prompt_id: str
    images: tuple[str, ...] = ()  # references as the line gives them (paths or URLs)


@dataclass
class PoolImportResult:
    lines: int = 0
    prompts_created: int = 0
    completions_created: int = 0
    models_created: list[str] = field(default_factory=list)
    images_stored: int = 0


#: Seconds an image URL may take to connect, answer and send, in all.
IMAGE_FETCH_TIMEOUT = 20.0


@dataclass(frozen=True)
class ImageSources:
    """Where a pool file's images may come from: paths under ``root`` (the file's folder
    unless the operator names another), URLs through the guarded client (``arena.outbound``),
    which reaches no loopback, private or metadata address unless ``allow_hosts`` (host names,
    addresses or networks) names it. Plain http is taken: the operator wrote the file, and the
    guard is about where a URL leads, not how."""

    root: Path
    allow_hosts: tuple[str, ...] = ()

    def policy(self) -> OutboundPolicy:
        return OutboundPolicy(
            allow_http=True,
            allow_hosts=self.allow_hosts,
            timeout_seconds=IMAGE_FETCH_TIMEOUT,
            allow_http_by="",
            allow_hosts_by="import_pool --images-allow-host",
        )


def _text(value: str, name: str, line_no: int) -> str:
    """``value`` if a database can store it (``arena.inputs.text_problem``): JSON's ``\\u0000``
    and a lone ``\\ud800`` decode to strings PostgreSQL refuses."""
    problem = text_problem(value)
    if problem is not None:
        raise ArenaError(ErrorCode.INVALID_LINE, f"line {line_no}: '{name}' {problem}.", field=name)
    return value


def _turns(value: Any, name: str, line_no: int) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(t, str) and t.strip() for t in value)
    ):
        raise ArenaError(
            ErrorCode.INVALID_LINE,
            f"line {line_no}: '{name}' must be a non-empty string or list of non-empty strings.",
            field=name,
        )
    return tuple(_text(t, name, line_no) for t in value)


def _optional_str(obj: dict[str, Any], name: str, line_no: int, default: str = "") -> str:
    value = obj.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ArenaError(
            ErrorCode.INVALID_LINE, f"line {line_no}: '{name}' must be a string.", field=name
        )
    return _text(str(value), name, line_no)


def _category(obj: dict[str, Any], line_no: int) -> str:
    value = _optional_str(obj, "category", line_no).strip().lower()
    if value and value not in PROMPT_CATEGORIES:
        raise ArenaError(
            ErrorCode.INVALID_LINE,
            f"line {line_no}: 'category' {value!r} is not one of {', '.join(PROMPT_CATEGORIES)}.",
            field="category",
        )
    return value


def _language(obj: dict[str, Any], line_no: int) -> str:
    value = _optional_str(obj, "language", line_no, "en").strip() or "en"
    if not _LANGUAGE_TAG.fullmatch(value):
        raise ArenaError(
            ErrorCode.INVALID_LINE,
            f"line {line_no}: 'language' {value!r} is not a language tag such as en, en-US or "
            "zh-Hant.",
            field="language",
        )
    # The tag's canonical case (en-US, zh-Hant), so that one language is one leaderboard view.
    parts = value.split("-")
    return "-".join(
        [parts[0].lower()]
        + [p.title() if len(p) == 4 else p.upper() for p in parts[1:]]  # script, region
    )


def pool_parse_line(raw: str, line_no: int) -> PoolLine:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise ArenaError(
            ErrorCode.INVALID_LINE, f"line {line_no}: not valid JSON ({exc})."
        ) from None
    if not isinstance(obj, dict):
        raise ArenaError(ErrorCode.INVALID_LINE, f"line {line_no}: expected a JSON object.")
    for required in ("prompt", "model", "completion"):
        if required not in obj:
            raise ArenaError(
                ErrorCode.INVALID_LINE, f"line {line_no}: missing '{required}'.", field=required
            )
    prompt = _turns(obj["prompt"], "prompt", line_no)
    completion = _turns(obj["completion"], "completion", line_no)
    if len(completion) != len(prompt):
        raise ArenaError(
            ErrorCode.INVALID_LINE,
            f"line {line_no}: 'completion' has {len(completion)} turns, 'prompt' has {len(prompt)}.",
            field="completion",
        )
    model = obj["model"]
    if not isinstance(model, str) or not slugify(model):
        raise ArenaError(
            ErrorCode.INVALID_LINE, f"line {line_no}: 'model' must be a model name.", field="model"
        )
    return PoolLine(
        line_no=line_no,
        prompt=prompt,
        model=_text(model, "model", line_no),
        completion=completion,
        category=_category(obj, line_no),
        language=_language(obj, line_no),
        prompt_id=_optional_str(obj, "prompt_id", line_no),
        images=_image_references(obj, line_no),
    )


def _image_references(obj: dict[str, Any], line_no: int) -> tuple[str, ...]:
    if "image" in obj and "images" in obj:
        raise ArenaError(
            ErrorCode.INVALID_LINE,
            f"line {line_no}: give 'images' (a list) or 'image' (one), not both.",
            field="images",
        )
    value = obj.get("images", obj.get("image"))
    if value is None or value == []:
        return ()
    if isinstance(value, str):
        value = [value]
    limit = settings.ARENA_IMAGE_MAX_PER_PROMPT
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ArenaError(
            ErrorCode.INVALID_LINE,
            f"line {line_no}: 'images' must be a path or URL, or a list of them.",
            field="images",
        )
    if len(value) > limit:
        raise ArenaError(
            ErrorCode.INVALID_LINE,
            f"line {line_no}: 'images' names {len(value)} images; a prompt has at most {limit} "
            "(ARENA_IMAGE_MAX_PER_PROMPT).",
            field="images",
        )
    return tuple(_text(v.strip(), "images", line_no) for v in value)


def _image_bytes(reference: str, sources: ImageSources) -> bytes:
    """The bytes ``reference`` names (a URL fetched through the guard, or a path under the
    images folder), at most ``ARENA_IMAGE_MAX_BYTES`` of them; an ``ArenaError`` saying why
    not."""
    limit = settings.ARENA_IMAGE_MAX_BYTES
    too_large = f"is larger than {limit} bytes (ARENA_IMAGE_MAX_BYTES)"
    if reference.startswith(("http://", "https://")):
        try:
            response = outbound_request(
                "GET", reference, policy=sources.policy(), max_bytes=limit + 1
            )
        except OutboundRefused as exc:
            raise _image_problem(f"{url_shown(reference)} is refused: {exc}") from None
        except OutboundFailed as exc:
            raise _image_problem(f"cannot fetch {url_shown(reference)} ({exc})") from None
        if response.status != 200:
            raise _image_problem(f"{url_shown(reference)} answered HTTP {response.status}")
        if len(response.body) > limit:
            raise _image_problem(f"{url_shown(reference)} {too_large}")
        return response.body
    root = sources.root.resolve()
    # Resolved, symlinks and ``..`` included, before the check: a link inside the folder that
    # points out of it is outside.
    path = (root / reference).resolve()
    if not path.is_relative_to(root):
        raise _image_problem(
            f"{reference} is outside the images folder {root} (import_pool --images-root)"
        )
    try:
        if path.stat().st_size > limit:
            raise _image_problem(f"{reference} {too_large}")
        return path.read_bytes()
    except OSError as exc:
        raise _image_problem(f"cannot read {reference}: {exc.strerror}") from None


def _image_problem(message: str) -> ArenaError:
    return ArenaError(ErrorCode.INVALID_LINE, message, field="images")


def _images_read(
    lines: list[PoolLine], sources: ImageSources, progress: Progress
) -> tuple[dict[str, CleanImage], list[str]]:
    """Every distinct image reference of ``lines`` read and checked once: the clean images by
    reference, and one problem per line naming a bad one."""
    clean: dict[str, CleanImage] = {}
    refused: dict[str, str] = {}
    references = list(dict.fromkeys(r for line in lines for r in line.images))
    for reference in progress(references, desc="checking images"):
        try:
            data = _image_bytes(reference, sources)
            clean[reference] = image_validate(data=data, max_pixels=settings.ARENA_IMAGE_MAX_PIXELS)
        except ArenaError as exc:
            refused[reference] = exc.message
    problems = [
        f"line {line.line_no}: image {reference!r}: {refused[reference]}"
        for line in lines
        for reference in line.images
        if reference in refused
    ]
    return clean, problems


def _model_slug(name: str) -> str:
    # Keep dots and the original spelling where it is already slug-like (e.g. vicuna-13b-v1.3):
    # the model slug rule (``arena.models.MODEL_SLUG``) takes both.
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.strip()).strip("-")
    return cleaned[:MODEL_SLUG_MAX] or slugify(name)[:MODEL_SLUG_MAX]


def pool_import(
    *,
    path: Path,
    source: str | None = None,
    progress: Progress = no_progress,
    images_root: Path | None = None,
    images_allow_hosts: Sequence[str] = (),
) -> PoolImportResult:
    """Import a JSONL pool file atomically; re-importing the same file changes nothing.

    Image paths are read under ``images_root`` (the file's folder by default) and nowhere
    else; image URLs reach no loopback, private or metadata address unless
    ``images_allow_hosts`` names it (``ImageSources``).

    Every line is checked first; if any is malformed, one ``ArenaError`` names each (up to
    ``MAX_REPORTED_LINES``), one per line of its message, and nothing is written.
    """
    source = source or f"import:{path.name}"
    if text_problem(source) is not None:
        raise ArenaError(
            ErrorCode.INVALID, "The source label holds a NUL or a surrogate.", field="source"
        )
    lines: list[PoolLine] = []
    problems: list[str] = []
    try:
        with path.open("rb") as handle:
            raw_lines = handle.readlines()
    except OSError as exc:
        raise ArenaError(
            ErrorCode.UNREADABLE, f"cannot read {path}: {exc.strerror}", field="file"
        ) from None
    for line_no, raw in enumerate(progress(raw_lines, desc="checking lines"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"line {line_no}: not UTF-8 text (byte {exc.start + 1}).")
            continue
        if not text.strip():
            continue
        try:
            lines.append(pool_parse_line(text, line_no))
        except ArenaError as exc:
            problems.append(exc.message)
    sources = ImageSources(
        root=images_root if images_root is not None else path.parent,
        allow_hosts=tuple(images_allow_hosts),
    )
    images, image_problems = _images_read(lines, sources, progress)
    problems += image_problems
    problems += _prompt_id_conflicts(lines, source, images)
    if len(problems) == 1:
        raise ArenaError(
            ErrorCode.INVALID_FILE, f"{path}: {problems[0]} Nothing was imported.", field="file"
        )
    if problems:
        shown = sorted(problems, key=_line_number)[:MAX_REPORTED_LINES]
        more = len(problems) - len(shown)
        raise ArenaError(
            ErrorCode.INVALID_FILE,
            f"{path}: {len(problems)} malformed lines; "
            "nothing was imported.\n"
            + "\n".join(shown)
            + (f"\n... and {more} more." if more else ""),
            field="file",
        )
    if not lines:
        raise ArenaError(ErrorCode.EMPTY, f"{path} holds no pool lines.", field="file")
    return pool_write(lines=lines, source=source, progress=progress, images=images)


def _line_number(problem: str) -> int:
    match = re.match(r"line (\d+):", problem)
    return int(match.group(1)) if match else 0


def _image_hashes(line: PoolLine, images: dict[str, CleanImage]) -> tuple[str, ...]:
    return tuple(hashlib.sha256(images[r].data).hexdigest() for r in line.images if r in images)


def _prompt_id_conflicts(
    lines: list[PoolLine], source: str, images: dict[str, CleanImage] | None = None
) -> list[str]:
    """Lines whose ``prompt_id`` names other turns (or other images) than an earlier line or
    the stored prompt."""
    images = images or {}
    pictures: dict[str, tuple[str, ...]] = {}
    for line in lines:
        if line.prompt_id and pictures.setdefault(
            line.prompt_id, _image_hashes(line, images)
        ) != _image_hashes(line, images):
            return [
                f"line {line.line_no}: prompt_id {line.prompt_id!r} was given other images on "
                "an earlier line."
            ]
    seen: dict[str, tuple[str, ...]] = {}
    ids = {line.prompt_id for line in lines if line.prompt_id}
    stored = {
        external_id: tuple(turns)
        for external_id, turns in Prompt.objects.filter(
            source=source, external_id__in=ids
        ).values_list("external_id", "turns")
    }
    problems = []
    for line in lines:
        if not line.prompt_id:
            continue
        if line.prompt_id in stored and stored[line.prompt_id] != line.prompt:
            problems.append(
                f"line {line.line_no}: prompt_id {line.prompt_id!r} was imported earlier from "
                f"{source!r} with other turns."
            )
        elif seen.setdefault(line.prompt_id, line.prompt) != line.prompt:
            problems.append(
                f"line {line.line_no}: prompt_id {line.prompt_id!r} was given other turns on an "
                "earlier line."
            )
    return problems


def pool_write(
    *,
    lines: list[PoolLine],
    source: str,
    model_defaults: dict[str, dict[str, str]] | None = None,
    progress: Progress = no_progress,
    images: dict[str, CleanImage] | None = None,
) -> PoolImportResult:
    """Write parsed pool lines in one transaction: models, prompts, their images (``images``:
    the checked images by the lines' references), pool completions (one variant per distinct
    text of a model's answer to a prompt). A stored file whose transaction fails is deleted.

    ``model_defaults`` maps a model name to the fields a newly created model gets
    (display_name, organization, license).
    """
    model_defaults = model_defaults or {}
    images = images or {}
    result = PoolImportResult(lines=len(lines))
    stored: list[PromptImage] = []
    try:
        with generation_bumps_deferred(), transaction.atomic():
            _pool_rows(lines, source, model_defaults, progress, images, result, stored)
    except BaseException:
        for image in stored:
            image.file.delete(save=False)
        raise
    result.images_stored = len(stored)
    return result


def _pool_rows(
    lines: list[PoolLine],
    source: str,
    model_defaults: dict[str, dict[str, str]],
    progress: Progress,
    images: dict[str, CleanImage],
    result: PoolImportResult,
    stored: list[PromptImage],
) -> None:
    """``pool_write``'s rows, in its transaction; each image file stored is put in ``stored``."""
    models: dict[str, ArenaModel] = {}
    for line in lines:
        slug = _model_slug(line.model)
        if slug not in models:
            defaults = {
                "display_name": line.model.strip(),
                **model_defaults.get(line.model, {}),
            }
            model, created = ArenaModel.objects.get_or_create(slug=slug, defaults=defaults)
            models[slug] = model
            if created:
                result.models_created.append(slug)
    for line in progress(lines, desc="writing the pool"):
        hashes = _image_hashes(line, images)
        # A prompt's identity is its turns and, when it has any, its images.
        identity: list[Any] = [list(line.prompt), list(hashes)] if hashes else list(line.prompt)
        external_id = (
            line.prompt_id or hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:40]
        )
        prompt, created = Prompt.objects.get_or_create(
            source=source,
            external_id=external_id,
            defaults={
                "turns": list(line.prompt),
                "category": line.category,
                "language": line.language,
                "image_count": len(hashes),
            },
        )
        result.prompts_created += created
        if created:
            for position, reference in enumerate(line.images):
                stored.append(_image_store(prompt, position, images[reference]))
        elif tuple(prompt.images.order_by("position").values_list("sha256", flat=True)) != hashes:
            raise ArenaError(
                ErrorCode.INVALID_LINE,
                f"line {line.line_no}: prompt_id '{external_id}' was imported earlier with "
                "other images.",
                field="images",
            )
        if list(prompt.turns) != list(line.prompt):
            raise ArenaError(
                ErrorCode.INVALID_LINE,
                f"line {line.line_no}: prompt_id '{external_id}' was given other turns earlier.",
                field="prompt",
            )
        # A text the model already has for this prompt is the same variant (re-importing a
        # file changes nothing); another text is one more variant, shown in rotation.
        _, created = Completion.objects.get_or_create(
            prompt=prompt,
            model=models[_model_slug(line.model)],
            source=Completion.Source.POOL,
            turns_hash=completion_turns_hash(line.completion),
            defaults={"turns": list(line.completion)},
        )
        result.completions_created += created


def _image_store(prompt: Prompt, position: int, clean: CleanImage) -> PromptImage:
    """A pool prompt's image: the file stored, then its row (no session, no battle)."""
    image = PromptImage(
        id=uuid.uuid4(),
        session_hash="",
        prompt=prompt,
        position=position,
        sha256=hashlib.sha256(clean.data).hexdigest(),
        mime=clean.mime,
        width=clean.width,
        height=clean.height,
        size=len(clean.data),
    )
    image.file.save(f"image{clean.extension}", ContentFile(clean.data), save=False)
    image.save()
    return image
