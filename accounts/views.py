"""A signed-in visitor's pages: their board, the download of their data, the deletion.

Signing in, up and out are django-allauth's pages (``/account/login/`` and the rest), in the
site's layout (``templates/allauth/layouts/base.html``).
"""

import json

from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_http_methods

from accounts.selectors import account_data, personal_board
from accounts.services import account_delete
from arena.selectors import account_votes


def _account_id(request: HttpRequest) -> int:
    """The signed-in visitor's account (every view here is ``login_required``)."""
    pk = request.user.pk
    assert pk is not None
    return int(pk)


@require_GET
@login_required
def account_page(request: HttpRequest) -> HttpResponse:
    """The visitor's own leaderboard, beside each model's public rank."""
    board = personal_board(account_id=_account_id(request))
    return render(request, "accounts/account.html", {"board": board})


@require_GET
@login_required
def account_data_download(request: HttpRequest) -> HttpResponse:
    """Everything kept about the account, as one JSON file (``accounts.selectors.account_data``)."""
    data = account_data(account=request.user)  # type: ignore[arg-type]
    day = timezone.now().date().isoformat()
    response = HttpResponse(
        json.dumps(data, cls=DjangoJSONEncoder, indent=2, ensure_ascii=False),
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="arena-account-{day}.json"'
    response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "POST"])
@login_required
def account_delete_page(request: HttpRequest) -> HttpResponse:
    """GET: what deleting the account removes and what it keeps, and the button; POST (with
    the CSRF token, checked by the middleware): the account is deleted, the visitor signed out.
    A staff account is deleted in the admin, not here."""
    user = request.user
    if request.method == "POST":
        if user.is_staff:
            raise PermissionDenied
        account_delete(account_id=_account_id(request))
        logout(request)
        messages.success(
            request,
            gettext("Your account is deleted. Its votes stay in the arena, without it."),
        )
        return redirect("arena:battle")
    votes = len(account_votes(account_id=_account_id(request)))
    return render(request, "accounts/delete.html", {"votes": votes, "staff": user.is_staff})
