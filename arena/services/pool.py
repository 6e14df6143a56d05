"""Importing a pool of prompts and completions from a JSONL file.

Each line is a JSON object::

    {"prompt": ["first user turn", "second user turn"],   # or one string
     "model": "my-model-7b",                               # slug of the answering model
     "completion": ["first answer", "second answer"],      # or one string; as many turns as prompt
     "category": "coding",                                 # optional
     "language": "en",                                     # optional
     "prompt_id": "q-17"}                                  # optional; groups lines on one prompt

Every line is checked before anything is written; a malformed line is reported with its line
number and nothing of the file is imported. Unknown models are registered as pool-only models.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils.text import slugify

from arena.errors import ArenaError
from arena.models import ArenaModel, Completion, Prompt


@dataclass(frozen=True)
class PoolLine:
    line_no: int
    prompt: tuple[str, ...]
    model: str
    completion: tuple[str, ...]
    category: str
    language: str
    prompt_id: str


@dataclass
class PoolImportResult:
    lines: int = 0
    prompts_created: int = 0
    completions_created: int = 0
    completions_updated: int = 0
    models_created: list[str] = field(default_factory=list)


def _turns(value: Any, name: str, line_no: int) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(t, str) and t.strip() for t in value)
    ):
        raise ArenaError(
            "invalid_line",
            f"line {line_no}: '{name}' must be a non-empty string or list of non-empty strings.",
            field=name,
        )
    return tuple(value)


def _optional_str(obj: dict[str, Any], name: str, line_no: int, default: str = "") -> str:
    value = obj.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str | int):
        raise ArenaError("invalid_line", f"line {line_no}: '{name}' must be a string.", field=name)
    return str(value)


def pool_parse_line(raw: str, line_no: int) -> PoolLine:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise ArenaError("invalid_line", f"line {line_no}: not valid JSON ({exc}).") from None
    if not isinstance(obj, dict):
        raise ArenaError("invalid_line", f"line {line_no}: expected a JSON object.")
    for required in ("prompt", "model", "completion"):
        if required not in obj:
            raise ArenaError(
                "invalid_line", f"line {line_no}: missing '{required}'.", field=required
            )
    prompt = _turns(obj["prompt"], "prompt", line_no)
    completion = _turns(obj["completion"], "completion", line_no)
    if len(completion) != len(prompt):
        raise ArenaError(
            "invalid_line",
            f"line {line_no}: 'completion' has {len(completion)} turns, 'prompt' has {len(prompt)}.",
            field="completion",
        )
    model = obj["model"]
    if not isinstance(model, str) or not slugify(model):
        raise ArenaError(
            "invalid_line", f"line {line_no}: 'model' must be a model name.", field="model"
        )
    return PoolLine(
        line_no=line_no,
        prompt=prompt,
        model=model,
        completion=completion,
        category=_optional_str(obj, "category", line_no),
        language=_optional_str(obj, "language", line_no, "en"),
        prompt_id=_optional_str(obj, "prompt_id", line_no),
    )


def _model_slug(name: str) -> str:
    # Keep dots and the original spelling where it is already slug-like (e.g. vicuna-13b-v1.3).
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.strip()).strip("-")
    return cleaned[:100] or slugify(name)[:100]


def pool_import(*, path: Path, source: str | None = None) -> PoolImportResult:
    """Import a JSONL pool file atomically; re-importing the same file changes nothing."""
    source = source or f"import:{path.name}"
    lines: list[PoolLine] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for line_no, raw in enumerate(handle, start=1):
                if raw.strip():
                    lines.append(pool_parse_line(raw, line_no))
    except OSError as exc:
        raise ArenaError(
            "unreadable", f"cannot read {path}: {exc.strerror}", field="file"
        ) from None
    except UnicodeDecodeError:
        raise ArenaError("unreadable", f"{path} is not UTF-8 text.", field="file") from None
    if not lines:
        raise ArenaError("empty", f"{path} holds no pool lines.", field="file")
    return pool_write(lines=lines, source=source)


def pool_write(
    *, lines: list[PoolLine], source: str, model_defaults: dict[str, dict[str, str]] | None = None
) -> PoolImportResult:
    """Write parsed pool lines in one transaction: models, prompts, pool completions.

    ``model_defaults`` maps a model name to the fields a newly created model gets
    (display_name, organization, license).
    """
    model_defaults = model_defaults or {}
    result = PoolImportResult(lines=len(lines))
    with transaction.atomic():
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
        for line in lines:
            external_id = (
                line.prompt_id or hashlib.sha256(json.dumps(line.prompt).encode()).hexdigest()[:40]
            )
            prompt, created = Prompt.objects.get_or_create(
                source=source,
                external_id=external_id,
                defaults={
                    "turns": list(line.prompt),
                    "category": line.category,
                    "language": line.language,
                },
            )
            result.prompts_created += created
            if list(prompt.turns) != list(line.prompt):
                raise ArenaError(
                    "invalid_line",
                    f"line {line.line_no}: prompt_id '{external_id}' was given other turns earlier.",
                    field="prompt",
                )
            completion, created = Completion.objects.get_or_create(
                prompt=prompt,
                model=models[_model_slug(line.model)],
                source=Completion.Source.POOL,
                defaults={"turns": list(line.completion)},
            )
            if created:
                result.completions_created += 1
            elif list(completion.turns) != list(line.completion):
                completion.turns = list(line.completion)
                completion.save(update_fields=["turns"])
                result.completions_updated += 1
    return result
