"""A request body's declared charset, read as Django means to read it.

Django ignores a charset it cannot look up and reads the body as DEFAULT_CHARSET. A name that
Python's codecs know but that is no text encoding (``rot13``, ``hex``, ``base64``, ``zlib``)
passes that lookup, and every read of ``request.POST`` then raised LookupError (``undefined``:
UnicodeError): a 500 from the CSRF check of any form, and a one-click unsubscribe (RFC 8058
allows a multipart body) that lost its opt-out. Such a charset is ignored the same way.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


class TextCharsetMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.encoding and not _decodes_text(request.encoding):
            request.encoding = None  # DEFAULT_CHARSET
        return self.get_response(request)


def _decodes_text(name: str) -> bool:
    try:
        b"x".decode(name, "replace")  # not b"": an empty input decodes without the codec
    except (LookupError, ValueError):
        return False
    return True
