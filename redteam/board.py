"""The red-team leaderboard: the newest robustness snapshot's models, challenges and players.

The interval plot is server-side SVG (no script, CSP-compliant), with the same numbers in a table.
Only players who opted in (``PlayerProfile.on_board``) appear, by pseudonym. The opt-ins are
read when the page is, not when the snapshot was fitted: a player who leaves the board is gone
at once, and one who joins shows the skill of the newest fit that has their attempts. The page
ends with the visitor's own opt-in form (``static/js/redteam-profile.js``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from arena.api import VOTER_SESSION_KEY
from arena.models import ArenaModel
from ratings.plots import forest_plot
from redteam.models import Challenge, PlayerProfile, RobustnessSnapshot
from redteam.transparency import redteam_transparency


def _plots(models: list[dict[str, Any]]) -> dict[str, SafeString]:
    """The robustness intervals drawn as the leaderboard draws ratings, in its two layouts."""
    rows: list[Any] = [
        {
            "model": r["name"],
            "name": r["label"],
            "rank": i + 1,
            "rating": r["robustness"],
            "rating_lower": r["lower"],
            "rating_upper": r["upper"],
        }
        for i, r in enumerate(models)
    ]
    title = gettext("Robustness with 95%% intervals")
    description = gettext("Models, most robust first: %(ratings)s.")
    axis = gettext("Robustness (logit, mean 0; 95%% interval)")

    def draw(plot_id: str, narrow: bool) -> SafeString:
        return forest_plot(
            rows,
            plot_id=plot_id,
            narrow=narrow,
            digits=2,
            title=title,
            description=description,
            axis=axis,
        )

    return {
        "wide": draw("robustness", False),
        "narrow": draw("robustness-narrow", True),
    }


def leaderboard(request: HttpRequest) -> HttpResponse:
    snapshot = RobustnessSnapshot.objects.order_by("-created_at").first()
    player_id = request.session.get(VOTER_SESSION_KEY)
    context: dict[str, Any] = {
        "snapshot": snapshot,
        "me": PlayerProfile.objects.filter(player_id=player_id).first() if player_id else None,
    }
    context["transparency"] = redteam_transparency(snapshot.payload if snapshot else None)
    if snapshot is not None:
        payload = snapshot.payload
        # The fit keys models and challenges by slug; the page shows their names.
        model_names = dict(ArenaModel.objects.values_list("slug", "display_name"))
        titles = dict(Challenge.objects.values_list("slug", "title"))
        models = sorted(
            (
                {**r, "label": model_names.get(r["name"], r["name"])}
                for r in payload.get("models", [])
            ),
            key=lambda r: -r["robustness"],
        )
        fitted = payload.get("players", [])
        on_board = dict(
            PlayerProfile.objects.filter(
                on_board=True, player_id__in=[p["player_id"] for p in fitted]
            ).values_list("player_id", "pseudonym")
        )
        context.update(
            models=models,
            plots=_plots(models),
            challenges=sorted(
                (
                    {**r, "label": titles.get(r["name"], r["name"])}
                    for r in payload.get("challenges", [])
                ),
                key=lambda r: -r["difficulty"],
            ),
            players=sorted(
                (
                    {**p, "pseudonym": on_board[p["player_id"]]}
                    for p in fitted
                    if p["player_id"] in on_board
                ),
                key=lambda r: -r["skill"],
            ),
        )
    return render(request, "redteam/leaderboard.html", context)
