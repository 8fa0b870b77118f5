"""Guards on what a request carries, before any view or middleware reads it.

- **A charset that is no text encoding.** Django ignores a body's charset that it cannot look
  up, and reads the body as DEFAULT_CHARSET. A name that Python's codecs know but that is no text
  encoding (``rot13``, ``hex``, ``base64``, ``zlib``) passes that lookup, and every read of
  ``request.POST`` then raised LookupError (``undefined``: UnicodeError): a 500 from the CSRF check
  of any form, and a one-click unsubscribe (RFC 8058 allows a multipart body) that lost its
  opt-out. Such a charset is ignored the same way.
- **A NUL character in the admin's URLs, or in a cookie.** PostgreSQL refuses NUL in text, so a
  NUL that reached a query (a list's filter, a text primary key, the session's key) was a 500. In
  an admin path no object is named so: 404; in an admin query string: 400. A cookie with one is
  none of ours (a quoted cookie may spell it ``\\000``): dropped, on every page, so a session
  cookie of one is no session rather than a 500. A form's fields refuse NUL themselves (Django's
  ProhibitNullCharactersValidator), and the tenant's and the public pages read their own
  parameters (a damaged unsubscribe link gets its own page, which says so).
- **Who is signing in.** The sign-in throttle counts failures per username and client address;
  the address is the connection's, or the one the last of TRUSTED_PROXY_COUNT proxies saw. The
  username is the one typed, cut to what the throttle's table holds: Django's sign-in form does
  not hold it to its max_length, and a longer one was a 500 when its failure was written.
"""

from __future__ import annotations

import ipaddress

from axes.models import AccessBase
from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

NUL = "\x00"
USERNAME_LENGTH = AccessBase._meta.get_field("username").max_length


class TextCharsetMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.encoding and not _decodes_text(request.encoding):
            request.encoding = None  # DEFAULT_CHARSET
        return self.get_response(request)


class NulMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if any(NUL in name or NUL in value for name, value in request.COOKIES.items()):
            request.COOKIES = {name: value for name, value in request.COOKIES.items()
                               if NUL not in name and NUL not in value}
        if not request.path.startswith(reverse("admin:index")):
            return self.get_response(request)
        if NUL in request.path:
            raise Http404("There is no such page.")
        if any(NUL in key or any(NUL in value for value in values)
               for key, values in request.GET.lists()):
            raise BadRequest("A NUL character is not allowed in a URL.")
        return self.get_response(request)


def _decodes_text(name: str) -> bool:
    try:
        b"x".decode(name, "replace")  # not b"": an empty input decodes without the codec
    except (LookupError, ValueError):
        return False
    return True


def client_address(request: HttpRequest) -> str | None:
    """The client's address as the outermost trusted proxy saw it: each of TRUSTED_PROXY_COUNT
    proxies appends the address it was reached from to X-Forwarded-For, so entries further left
    are whatever the client chose to send. None when that is no IP address (a proxy that sent
    something else, gunicorn on a Unix socket): the throttle's table stores an inet."""
    trusted = settings.TRUSTED_PROXY_COUNT
    hops = [hop.strip() for hop in request.headers.get("X-Forwarded-For", "").split(",")]
    address = hops[-trusted] if trusted and len(hops) >= trusted else request.META.get("REMOTE_ADDR", "")
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def client_username(request: HttpRequest, credentials: dict | None) -> str | None:
    """The username a sign-in was tried with (as axes reads it), cut to USERNAME_LENGTH."""
    field = settings.AXES_USERNAME_FORM_FIELD
    username = credentials.get(field) if credentials else request.POST.get(field)
    return username[:USERNAME_LENGTH] if isinstance(username, str) else username
