"""Guards on what a request carries, before any view or middleware reads it.

- **A charset that is no text encoding.** Django ignores a body's charset that it cannot look
  up, and reads the body as DEFAULT_CHARSET. A name that Python's codecs know but that is no text
  encoding (``rot13``, ``hex``, ``base64``, ``zlib``) passes that lookup, and every read of
  ``request.POST`` then raised LookupError (``undefined``: UnicodeError): a 500 from the CSRF check
  of any form, and a one-click unsubscribe (RFC 8058 allows a multipart body) that lost its
  opt-out. Such a charset is ignored the same way.
- **A NUL character in the admin's URLs.** PostgreSQL refuses NUL in text, so a NUL that reached
  a query (a list's filter, a text primary key) was a 500. In the path no object is named so:
  404; in the query string: 400. A form's fields refuse NUL themselves (Django's
  ProhibitNullCharactersValidator), and the tenant's and the public pages read their own
  parameters (a damaged unsubscribe link gets its own page, which says so).
- **Who is signing in.** The sign-in throttle counts failures per username and client address;
  the address is the connection's, or the one the last of TRUSTED_PROXY_COUNT proxies saw.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

NUL = "\x00"


class TextCharsetMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.encoding and not _decodes_text(request.encoding):
            request.encoding = None  # DEFAULT_CHARSET
        return self.get_response(request)


class AdminNulMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
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
