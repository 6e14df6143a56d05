"""The leaderboard page and its downloads. They read the latest snapshot and never fit.

Each view of a snapshot (a category and a style setting), its charts in the visitor's language
and its downloads' bodies are built once per snapshot and kept in the cache
(``ratings.page_cache``): a visit reads the newest snapshot's head and the cache, whatever the
number of votes. The snapshot a cached view carries is a copy without the categories' results
(``_light``), so that each view's entry holds one view's figures, not the whole payload.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import translation
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.translation import get_language, gettext, gettext_lazy, ngettext
from django.views.decorators.http import require_GET

from ratings import plots
from ratings.csv_cells import neutralise
from ratings.model_pages import SERIES_TOP_MODELS, model_page, model_public, rating_series
from ratings.models import LeaderboardSnapshot
from ratings.page_cache import SnapshotHead, snapshot_cached, snapshot_head, snapshot_row
from ratings.selectors import STYLE_OPTIONS, LeaderboardView, leaderboard_view, snapshot_payload
from ratings.transparency import ledger_json, transparency, transparency_ledger

RATED_FIELDS = (
    "rank",
    "model",
    "name",
    "organization",
    "license",
    "active",
    "rating",
    "rating_lower",
    "rating_upper",
    "votes",
    # The rank spread is ``rank`` to ``rank_worst``; ``tier`` is empty for a preliminary model.
    # Both are empty (null) for a snapshot written before they were computed.
    "rank_worst",
    "tier",
    "preliminary",
)
PROVISIONAL_FIELDS = (
    "model",
    "name",
    "organization",
    "license",
    "active",
    "battles",
    "wins",
    "losses",
    "ties",
    "reason",
    "reason_text",  # the reason in words: why it is not rated and what rates it
)
# One row per model: rated ones fill the rating columns (status ``rated``, or ``preliminary``
# below RATINGS_ESTABLISHED_MIN_VOTES votes), provisional ones the record.
CSV_FIELDS = (
    *(f for f in RATED_FIELDS if f != "preliminary"),
    "status",
    "battles",
    "wins",
    "losses",
    "ties",
    "reason",
    "reason_text",
)
# Cells whose text comes from people (model names and descriptions), never numbers.
TEXT_FIELDS = ("model", "name", "organization", "license")
NOT_COMPUTED = gettext_lazy("The leaderboard has not been computed yet.")


def _not_computed() -> JsonResponse:
    """A download's 404 before the first snapshot, in the JSON error shape of every download."""
    return JsonResponse(
        {"error": {"code": "not_computed", "message": str(NOT_COMPUTED)}}, status=404
    )


# What a cached view's snapshot keeps of each category: the tabs' fields, not the results.
_CATEGORY_TAB_FIELDS = ("key", "label", "description", "n_votes", "status", "reason")


def _light(snapshot: LeaderboardSnapshot) -> LeaderboardSnapshot:
    """A copy of ``snapshot`` whose payload keeps what the page and the downloads read from it
    besides the chosen view: the categories' tabs, the excluded votes, the votes by source."""
    payload = snapshot_payload(snapshot)
    light: dict[str, Any] = {
        "schema": payload.get("schema"),
        "models": {},
        "categories": [
            {k: c[k] for k in _CATEGORY_TAB_FIELDS if k in c}  # type: ignore[literal-required]
            for c in payload.get("categories", [])
        ],
    }
    for key in ("excluded", "by_source"):
        if key in payload:
            light[key] = payload[key]
    return LeaderboardSnapshot(
        pk=snapshot.pk,
        created_at=snapshot.created_at,
        vote_high_water=snapshot.vote_high_water,
        n_votes=snapshot.n_votes,
        params=snapshot.params,
        params_digest=snapshot.params_digest,
        duration_seconds=snapshot.duration_seconds,
        payload=light,
    )


def _built(head: SnapshotHead, category: str, style: str) -> LeaderboardView:
    view = leaderboard_view(snapshot_row(head), category=category or None, style=style)
    return replace(view, snapshot=_light(view.snapshot))


def _view_at(request: HttpRequest) -> tuple[SnapshotHead, LeaderboardView] | None:
    """The newest snapshot's head and the view the query asks for (cached per snapshot).

    The query is resolved against the snapshot's category keys first (themselves cached), so
    an unknown category shares overall's entry instead of adding one per query string.
    """
    head = snapshot_head()
    if head is None:
        return None
    keys: list[str] = snapshot_cached(
        head,
        "category-keys",
        (),
        lambda: [c["key"] for c in snapshot_payload(snapshot_row(head)).get("categories", [])],
    )
    asked = request.GET.get("category") or ""
    category = asked if asked in keys else ""
    style = request.GET.get("style") or ""
    style = style if style in STYLE_OPTIONS else "on"
    view = snapshot_cached(head, "view", (category, style), lambda: _built(head, category, style))
    return head, view


def _view(request: HttpRequest) -> LeaderboardView | None:
    found = _view_at(request)
    return found[1] if found else None


def _charts(view: LeaderboardView) -> dict[str, Any]:
    result = view.result
    if not result:
        return {}
    names = {row["model"]: row["name"] for row in view.rows}
    matrices = result.get("matrices")
    labels = [names.get(slug, slug) for slug in matrices["models"]] if matrices else []
    charts: dict[str, Any] = {
        "forest": plots.forest_plot(view.rows),
        "forest_narrow": plots.forest_plot(view.rows, plot_id="forest-narrow", narrow=True),
        "labels": labels,
    }
    if matrices and labels:
        maps: dict[str, dict[str, Any]] = {
            "winrate": {
                "values": matrices["win_fraction"],
                "kind": "fraction",
                "title": gettext("Win fraction of the row model against the column model"),
                "desc": gettext(
                    "Share of battles the model in the row won against the model in the column "
                    "(a tie counts as half), models in rating order."
                ),
            },
            "counts": {
                "values": matrices["battle_counts"],
                "kind": "count",
                "title": gettext("Battles between each pair of models"),
                "desc": gettext(
                    "Number of rated battles between the model in the row and the model in the "
                    "column, models in rating order."
                ),
            },
        }
        for key, spec in maps.items():
            charts[key] = plots.heatmap(labels=labels, plot_id=key, **spec)
            charts[f"{key}_narrow"] = plots.heatmap(
                labels=labels, plot_id=f"{key}-narrow", narrow=True, **spec
            )
        charts["matrix_rows"] = [
            {
                "label": label,
                "cells": [
                    {"win": w, "count": c}
                    for w, c in zip(
                        matrices["win_fraction"][i], matrices["battle_counts"][i], strict=True
                    )
                ],
            }
            for i, label in enumerate(labels)
        ]
    coefficients = result.get("style_coefficients")
    if coefficients:
        intervals = result.get("style_coefficient_intervals")
        charts["style"] = plots.style_plot(coefficients, intervals)
        charts["style_narrow"] = plots.style_plot(
            coefficients, intervals, plot_id="style-narrow", narrow=True
        )
        intervals = result.get("style_coefficient_intervals") or {}
        charts["style_rows"] = [
            {
                "label": plots.style_label(name),
                "value": value,
                "interval": intervals.get(name),
            }
            for name, value in coefficients.items()
        ]
    series = rating_series(
        models=[row["model"] for row in view.rows[:SERIES_TOP_MODELS]],
        category=view.category["key"],
        style=view.style,
    )
    if series:
        title = ngettext(
            "Top %(n)s model's rating across snapshots",
            "Top %(n)s models' rating across snapshots",
            len(series),
        ) % {"n": len(series)}
        charts["over_time"] = plots.rating_time_plot(series, title=title)
        charts["over_time_narrow"] = plots.rating_time_plot(
            series, plot_id="over-time-narrow", title=title, narrow=True
        )
        charts["over_time_rows"] = series
    return charts


@require_GET
def leaderboard_page(request: HttpRequest) -> HttpResponse:
    found = _view_at(request)
    view = found[1] if found else None
    context: dict[str, Any] = {"view": view}
    if found is not None and view is not None:
        head = found[0]
        query = urlencode({"category": view.category["key"], "style": view.style})
        # The charts' titles and descriptions are in the visitor's language.
        charts = snapshot_cached(
            head,
            "charts",
            (view.category["key"], view.style, get_language() or ""),
            lambda: _charts(view),
        )
        context.update(
            query=query,
            charts=charts,
            other_style="off" if view.style == "on" else "on",
        )
    return render(request, "ratings/leaderboard.html", context)


@require_GET
def transparency_page(request: HttpRequest) -> HttpResponse:
    """How the arena samples, every model it served, the votes it left out (the data, live)."""
    return render(request, "ratings/transparency.html", {"t": transparency()})


def transparency_ledger_json(request: HttpRequest) -> HttpResponse:
    """The fairness ledger of /transparency as JSON (``ratings.api`` routes it)."""
    return JsonResponse(ledger_json(transparency_ledger()))


@require_GET
def model_detail_page(request: HttpRequest, name: str) -> HttpResponse:
    """A public model's card: catalogue, ratings by category, rating over time, opponents."""
    model = model_public(name=name)
    if model is None:
        raise Http404(gettext("No public model by that name."))
    page = model_page(model=model)

    def draw() -> dict[str, SafeString]:
        title = gettext("%(name)s: rating over time") % {"name": model.display_name}
        return {
            "wide": plots.rating_time_plot([page.series], plot_id="model-over-time", title=title),
            "narrow": plots.rating_time_plot(
                [page.series], plot_id="model-over-time-narrow", title=title, narrow=True
            ),
        }

    head = page.snapshot
    # By display name too: a renamed model's title changes before the next snapshot.
    parts = (model.slug, model.display_name, get_language() or "")
    chart = draw() if head is None else snapshot_cached(head, "model-charts", parts, draw)
    return render(request, "ratings/model.html", {"page": page, "m": model, "chart": chart})


def _filename(view: LeaderboardView, ext: str) -> str:
    return f"leaderboard-{view.snapshot.pk}-{view.category['key']}-style-{view.style}.{ext}"


@require_GET
def leaderboard_csv(request: HttpRequest) -> HttpResponse:
    found = _view_at(request)
    if found is None:
        return _not_computed()
    head, view = found
    text = snapshot_cached(head, "csv", (view.category["key"], view.style), lambda: _csv_text(view))
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename(view, "csv")}"'
    return response


def _csv_text(view: LeaderboardView) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for rated in view.rows:
        row: dict[str, Any] = dict(rated)
        writer.writerow(
            {
                **row,
                **{key: neutralise(row[key]) for key in TEXT_FIELDS},
                "rating": f"{row['rating']:.2f}",
                "rating_lower": f"{row['rating_lower']:.2f}",
                "rating_upper": f"{row['rating_upper']:.2f}",
                "status": "preliminary" if row["preliminary"] else "rated",
            }
        )
    for provisional in view.provisional:
        unrated: dict[str, Any] = dict(provisional)
        writer.writerow(
            {
                **{key: unrated[key] for key in PROVISIONAL_FIELDS},
                **{key: neutralise(unrated[key]) for key in TEXT_FIELDS},
                "status": "provisional",
            }
        )
    return buffer.getvalue()


def _pick(row: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``keys`` of ``row``; None for those an older snapshot lacks."""
    return {key: row.get(key) for key in keys}


@require_GET
def leaderboard_json(request: HttpRequest) -> HttpResponse:
    found = _view_at(request)
    if found is None:
        return _not_computed()
    head, view = found
    text = snapshot_cached(
        head, "json", (view.category["key"], view.style), lambda: _json_text(view)
    )
    response = HttpResponse(text, content_type="application/json")
    response["Content-Disposition"] = f'inline; filename="{_filename(view, "json")}"'
    return response


def _english_reason(view: LeaderboardView) -> str:
    if view.reason_code is None:
        return str(view.stored_reason or "")
    with translation.override("en"):
        return view.reason


def _json_text(view: LeaderboardView) -> str:
    """The download's body, as ``JsonResponse`` would write it."""
    snapshot = view.snapshot
    result = view.result
    category: dict[str, Any] = dict(view.category)
    body = {
        "snapshot": {
            "id": snapshot.pk,
            "created_at": snapshot.created_at.isoformat(),
            "vote_high_water": snapshot.vote_high_water,
            "n_votes": snapshot.n_votes,
            "params": snapshot.params,
            # Votes left out, by reason (schema 3; None for an older snapshot).
            "excluded": snapshot.payload.get("excluded"),
            # Rated votes by battle source: pool, live, mixed (None for an older snapshot).
            "by_source": snapshot.payload.get("by_source"),
        },
        "category": {k: category[k] for k in ("key", "label", "description", "n_votes")},
        "status": "ok" if view.result else "insufficient",
        # The reason as a code with its figures, and in English words (downloads are never
        # localised); an older snapshot's sentence this code does not know, as stored.
        "reason_code": view.reason_code,
        "reason": _english_reason(view),
        "style_control": view.style == "on",
        "models": [_pick(row, RATED_FIELDS) for row in view.rows],
        "provisional": [_pick(row, PROVISIONAL_FIELDS) for row in view.provisional],
        "style_coefficients": result.get("style_coefficients") if result else None,
        "style_coefficient_intervals": (
            result.get("style_coefficient_intervals") if result else None
        ),
        "n_battles": result.get("n_battles", 0) if result else 0,
        "n_battles_input": (
            result.get("n_battles_input", result.get("n_battles", 0)) if result else 0
        ),
        "method": result.get("method") if result else None,
        # The left side's coefficient (schema 7; None without RATINGS_POSITION or before).
        "position": result.get("position") if result else None,
        "warnings": view.warnings,
        "matrices": result.get("matrices") if result else None,
        # How many votes removed or reversed swap each adjacent rank of the top (schema 7;
        # None for an older snapshot, a streamed one, or a view not rated).
        "fragility": result.get("fragility") if result else None,
    }
    return json.dumps(body, cls=DjangoJSONEncoder, indent=1)
