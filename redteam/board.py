"""The red-team leaderboard: the newest robustness snapshot's models, challenges and players.

The interval plot is server-side SVG (no script, CSP-compliant), with the same numbers in a table.
Only players who opted in (``PlayerProfile.on_board``) appear, by pseudonym.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from redteam.models import RobustnessSnapshot

PLOT_WIDTH = 600
ROW_HEIGHT = 22


def _plot(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometry of the interval plot: one row per model, x from the lowest lower bound."""
    if not rows:
        return {"rows": [], "height": 0, "width": PLOT_WIDTH}
    low = min(r["lower"] for r in rows)
    high = max(r["upper"] for r in rows)
    span = (high - low) or 1.0
    left, right = 160, PLOT_WIDTH - 20

    def x(v: float) -> float:
        return round(float(left + (v - low) / span * (right - left)), 1)

    return {
        "width": PLOT_WIDTH,
        "height": ROW_HEIGHT * len(rows) + 10,
        "rows": [
            {
                "name": r["name"],
                "y": ROW_HEIGHT * i + 15,
                "x": x(r["robustness"]),
                "x1": x(r["lower"]),
                "x2": x(r["upper"]),
            }
            for i, r in enumerate(rows)
        ],
    }


def leaderboard(request: HttpRequest) -> HttpResponse:
    snapshot = RobustnessSnapshot.objects.order_by("-created_at").first()
    context: dict[str, Any] = {"snapshot": snapshot}
    if snapshot is not None:
        payload = snapshot.payload
        models = sorted(payload.get("models", []), key=lambda r: -r["robustness"])
        context.update(
            models=models,
            plot=_plot(models),
            challenges=sorted(payload.get("challenges", []), key=lambda r: -r["difficulty"]),
            players=sorted(
                (p for p in payload.get("players", []) if p.get("pseudonym")),
                key=lambda r: -r["skill"],
            ),
        )
    return render(request, "redteam/leaderboard.html", context)
