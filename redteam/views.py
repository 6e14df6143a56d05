"""The red-teaming pages: the challenges, and the chat page of one (played over /ws/redteam)."""

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET

from arena.api import session_identity
from arena.selectors import live_models_available, terms_accepted
from arena.services.vote_guards import CHALLENGE_SESSION_KEY
from redteam.selectors import challenge_active, challenges_active


@require_GET
def challenge_list(request: HttpRequest) -> HttpResponse:
    """The active challenges; with no live model to play against, the page says so first."""
    return render(
        request,
        "redteam/list.html",
        {"challenges": challenges_active(), "live_off": not live_models_available().exists()},
    )


@require_GET
@ensure_csrf_cookie
def play_page(request: HttpRequest, slug: str) -> HttpResponse:
    """One challenge's chat page; the session and voter id are made here, as the battle
    page makes them, and the page accepts the terms and solves the challenge over the API."""
    challenge = challenge_active(slug=slug)
    if challenge is None:
        raise Http404("No such challenge.")
    _, voter_id = session_identity(request)
    return render(
        request,
        "redteam/play.html",
        {
            "challenge": challenge,
            "terms_accepted": terms_accepted(voter_id=voter_id),
            "challenge_pending": settings.ARENA_CHALLENGE
            and not request.session.get(CHALLENGE_SESSION_KEY),
        },
    )
