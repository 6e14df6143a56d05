"""The pages (the battle page, the about page, a shared outcome and its card) and the 429 of
the rate limits; the JSON API's operations are in ``arena.visitor_api``."""

import hashlib
import json
import uuid

from csp.decorators import csp
from django.conf import settings
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import get_language, gettext, gettext_lazy
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET

from arena.api import error_json, session_identity
from arena.battle_sources import battle_sources_have_work
from arena.errors import rate_limited
from arena.links import absolute_url, public_host
from arena.live.images import image_stored
from arena.selectors import (
    live_battles_enabled,
    pool_available,
    reaction_tags_active,
    terms_accepted,
)
from arena.services.vote_guards import CHALLENGE_SESSION_KEY
from arena.share_card import card_png
from arena.shares import SharedOutcome, share_headline, share_outcome


def ratelimited(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_json(rate_limited())


# The kinds of battle the page serves, in the order the page offers them.
BATTLE_KINDS = (
    (
        "live",
        gettext_lazy("Ask two models"),
        gettext_lazy("Type a prompt; two anonymous models answer it live."),
    ),
    (
        "pool",
        gettext_lazy("Rate two answers"),
        gettext_lazy("Read two anonymous answers already given to a prompt."),
    ),
)


# The policy of the frame code answers run in (templates/arena/run_frame.html): its own inline
# scripts and styles run, images only from data: URLs, nothing else is fetched or connected to
# (no fetch, no XHR, no websocket, no form posts), and only this site's pages may frame it.
RUN_FRAME_CSP = {
    "default-src": ["'none'"],
    "script-src": ["'unsafe-inline'"],
    "style-src": ["'unsafe-inline'"],
    "img-src": ["data:"],
    "base-uri": ["'none'"],
    "form-action": ["'none'"],
    "frame-ancestors": ["'self'"],
}


@require_GET
@xframe_options_sameorigin
@csp(RUN_FRAME_CSP)
def run_frame(request: HttpRequest) -> HttpResponse:
    """The sandboxed frame an HTML or JavaScript answer runs in: a fixed page that writes the
    code its parent posts to it. Nothing of the answer reaches the server."""
    return render(request, "arena/run_frame.html")


@require_GET
@ensure_csrf_cookie
def battle_page(request: HttpRequest) -> HttpResponse:
    """Live battles (a typed prompt) and pool battles (two stored answers, imported pools
    included), each offered when it can be served; ``?mode=live|pool`` picks one, else live."""
    _, voter_id = session_identity(request)
    # Pool mode also serves environment battles, so it is offered when only they can be served.
    available = {
        "live": live_battles_enabled(),
        "pool": pool_available() or battle_sources_have_work(),
    }
    kinds = [
        {"key": key, "label": label, "description": description}
        for key, label, description in BATTLE_KINDS
        if available[key]
    ]
    offered = [kind["key"] for kind in kinds]
    requested = request.GET.get("mode", "")
    # With neither kind available, pool mode says so when it asks for a battle.
    mode = requested if requested in offered else (offered[0] if offered else "pool")
    return render(
        request,
        "arena/battle.html",
        {
            "terms_accepted": terms_accepted(voter_id=voter_id),
            "mode": mode,
            "kinds": kinds if len(kinds) > 1 else [],
            "terms_version": settings.ARENA_TERMS_VERSION,
            # The reasons offered with each thumbs, as JSON in a data attribute (no inline script).
            "reaction_tags": json.dumps(reaction_tags_active()),
            # The page solves the challenge in the background before the first vote.
            "challenge": settings.ARENA_CHALLENGE
            and not request.session.get(CHALLENGE_SESSION_KEY),
            # ``?mode=live`` asked for what this site cannot serve: the page says so.
            "live_off": requested == "live" and not available["live"],
            "image_max_per_prompt": settings.ARENA_IMAGE_MAX_PER_PROMPT,
            # A Python block's run is stopped after this many seconds.
            "code_run_seconds": f"{settings.ARENA_CODE_RUN_SECONDS:g}",
        },
    )


@require_GET
def about_page(request: HttpRequest) -> HttpResponse:
    return render(request, "arena/about.html")


def _shared(token: str) -> SharedOutcome:
    outcome = share_outcome(token=token)
    if outcome is None:
        raise Http404("No such shared battle.")
    return outcome


@require_GET
def share_page(request: HttpRequest, token: str) -> HttpResponse:
    """A voted battle's outcome as its voter shared it: open to anyone with the link."""
    outcome = _shared(token)
    headline = share_headline(outcome)
    card_path = reverse("arena:share-card", args=[token])
    description = outcome.prompt_excerpt or headline
    return render(
        request,
        "arena/share.html",
        {
            "outcome": outcome,
            "headline": headline,
            "description": description,
            "models": [outcome.model_a, outcome.model_b],
            "page_url": absolute_url(reverse("arena:share", args=[token])),
            # The previews' crawlers copy the public origin's link; the page itself shows the
            # card from wherever it was served (the site's own policy allows only 'self').
            "card_url": absolute_url(card_path),
            "card_path": card_path,
        },
    )


@require_GET
def share_card(request: HttpRequest, token: str) -> HttpResponse:
    """The outcome's 1200x630 PNG. Drawing one costs tens of milliseconds of CPU and a shared
    link is fetched by every preview crawler and visitor, so the card is drawn once per token
    and language (it names the public host, which is the same for every request), kept in the
    cache for a day, and browsers and proxies keep it as long."""
    outcome = _shared(token)
    host = public_host()
    key = "share-card:" + hashlib.sha256(f"{token}|{get_language()}".encode()).hexdigest()
    png = cache.get(key)
    if png is None:
        png = card_png(
            headline=share_headline(outcome),
            prompt=outcome.prompt_excerpt,
            footer=gettext("Vote blind: %(host)s") % {"host": host},
        )
        cache.set(key, png, SHARE_CARD_SECONDS)
    response = HttpResponse(png, content_type="image/png")
    response["Cache-Control"] = f"public, max-age={SHARE_CARD_SECONDS}"
    return response


SHARE_CARD_SECONDS = 24 * 60 * 60


@require_GET
def prompt_image(request: HttpRequest, image_id: uuid.UUID) -> HttpResponse:
    """A prompt's image, to whoever has its link: the id is random (UUID4), so a link is as good
    as a key, as a share link is. Served as the re-encoded format it is stored in, never sniffed
    as anything else, shown inline, and under a policy that runs nothing."""
    stored = image_stored(image_id=image_id)
    if stored is None:
        raise Http404("No such image.")
    image, data = stored
    response = HttpResponse(data, content_type=image.mime)
    response["X-Content-Type-Options"] = "nosniff"
    extension = "png" if image.mime == "image/png" else "jpg"
    response["Content-Disposition"] = f'inline; filename="{image.pk.hex}.{extension}"'
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=86400"
    return response
