from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from growth.tenancy import membership

LOGIN_URL = "growth:tenant:login"


def member_view(*, edit: bool = False) -> Callable:
    """Resolve the URL's account slug through the user's memberships and call the view with the
    membership. Not a member (or no such account): 404, the same either way. ``edit``: the
    viewer role gets 403."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required(login_url=LOGIN_URL)
        @wraps(view)
        def wrapper(request: HttpRequest, slug: str, *args, **kwargs) -> HttpResponse:
            member = membership(request.user, slug=slug)
            if member is None:
                raise Http404("You have no account with this name.")
            if edit and not member.can_edit:
                raise PermissionDenied("Your role in this account is read only.")
            return view(request, member, *args, **kwargs)

        return wrapper

    return decorator
