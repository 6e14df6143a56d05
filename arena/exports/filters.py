"""What an export selects, from query parameters or the command's options: each bad value is a
400 naming its parameter, refused before the export starts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_date, parse_datetime

from arena.errors import ArenaError, ErrorCode
from arena.exports.formats import FORMATS
from arena.models import ArenaModel, Prompt

_BOOLEANS = {
    "": False,
    "0": False,
    "false": False,
    "no": False,
    "1": True,
    "true": True,
    "yes": True,
}


def parse_moment(value: str, *, field_name: str) -> datetime:
    """An ISO date (midnight UTC) or datetime (UTC when it names no zone), in UTC.

    A moment that is not a UTC datetime (0001-01-01 to 9999-12-31) is refused here, before an
    export starts: ``0001-01-01T00:00:00+05:00`` is a time in year 0 in UTC, which a database
    driver would fail to convert only once the query runs, halfway through a download.
    """
    try:
        moment = parse_datetime(value)
        day = parse_date(value) if moment is None and len(value) == 10 else None
    except (ValueError, OverflowError):  # well formed but not a real date or time
        moment = day = None
    if day is not None:
        moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
    if moment is None:
        raise ArenaError(
            ErrorCode.INVALID,
            f"{field_name} must be an ISO date or datetime, e.g. 2026-11-30.",
            field=field_name,
        )
    try:
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ArenaError(
            ErrorCode.INVALID,
            f"{field_name} is outside the calendar in UTC (0001-01-01 to 9999-12-31).",
            field=field_name,
        ) from None


# A BCP 47-like language tag, as prompts store them ("en", "zh-Hant", "pt-BR").
_LANGUAGE = re.compile(r"[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*")


def _model_filter(models: Sequence[str]) -> list[str]:
    slugs = list(dict.fromkeys(slug.strip() for slug in models if slug.strip()))
    known = set(ArenaModel.objects.filter(slug__in=slugs).values_list("slug", flat=True))
    unknown = [slug for slug in slugs if slug not in known]
    if unknown:
        raise ArenaError(
            ErrorCode.INVALID,
            f"model names no model of this arena: {', '.join(unknown)} (give model slugs).",
            field="model",
        )
    return slugs


def _category_filter(category: str) -> str:
    if not Prompt.objects.filter(category=category).exists():
        known = (
            Prompt.objects.exclude(category="")
            .order_by("category")
            .values_list("category", flat=True)
            .distinct()[:30]
        )
        raise ArenaError(
            ErrorCode.INVALID,
            f"category {category!r} is no prompt's category; the categories are: "
            f"{', '.join(known) or 'none yet'}.",
            field="category",
        )
    return category


def export_options(
    params: Mapping[str, str], *, models: Sequence[str] = ()
) -> tuple[str, dict[str, Any]]:
    """The format and the selector's filters from query parameters (or the command's options).

    ``format`` (required: one of ``FORMATS``), ``include_named`` and ``include_flagged``
    (``1``/``true``/``yes``), ``since`` and ``until`` (ISO dates or datetimes), ``category``
    (one the prompts have) and ``language`` (a language tag); ``models`` are model slugs (a
    repeatable parameter, hence apart), each one this arena has.
    """
    fmt = params.get("format") or ""
    if fmt not in FORMATS:
        raise ArenaError(
            ErrorCode.INVALID, f"format must be one of {', '.join(FORMATS)}.", field="format"
        )
    filters: dict[str, Any] = {}
    for flag in ("include_named", "include_flagged"):
        filters[flag] = _flag(params, flag)
    for bound in ("since", "until"):
        if params.get(bound):
            filters[bound] = parse_moment(params[bound], field_name=bound)
    if slugs := _model_filter(models):
        filters["models"] = slugs
    if category := params.get("category") or "":
        filters["category"] = _category_filter(category)
    if language := params.get("language") or "":
        if len(language) > 20 or not _LANGUAGE.fullmatch(language):
            raise ArenaError(
                ErrorCode.INVALID,
                "language must be a language tag such as en or pt-BR.",
                field="language",
            )
        filters["language"] = language
    return fmt, filters


def _flag(params: Mapping[str, str], name: str) -> bool:
    """A yes/no query parameter (absent: no), or a 400 naming it."""
    value = (params.get(name) or "").lower()
    if value not in _BOOLEANS:
        raise ArenaError(ErrorCode.INVALID, f"{name} must be 1 or 0.", field=name)
    return _BOOLEANS[value]


def first_turn_option(params: Mapping[str, str]) -> bool:
    """``first_turn_only`` of the query parameters (or the command's option)."""
    return _flag(params, "first_turn_only")
