"""A campaign's MIME message, laid out once and filled in per recipient.

Building every message with Python's ``email`` package costs about a millisecond; almost all of
it is spent re-deciding things that are the same for the whole campaign (structure, boundary,
From, charsets). Here the skeleton is decided once, and per recipient only the parts that vary
are encoded and joined. What comes out parses to the same message Django would build (the
tests compare both); anything unusual (a non-ASCII recipient, a line over 998 octets) falls back
to Django's own ``message()``.
"""

from __future__ import annotations

import re
import secrets
import time
from email.header import Header
from email.utils import formatdate

from django.conf import settings
from django.core.mail import BadHeaderError, EmailMultiAlternatives
from django.core.mail.message import forbid_multi_line_headers

CRLF = "\r\n"
MAX_LINE = 998  # octets, RFC 5322
_PLAIN_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9.-]+\Z")


class PrebuiltBytes:
    """What ``EmailMessage.message()`` returns, for the parts of Django that only want bytes."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def as_bytes(self, unixfrom: bool = False, linesep: str = "\n") -> bytes:
        return self._data  # already CRLF, as SMTP wants it

    def as_string(self, unixfrom: bool = False, linesep: str = "\n") -> str:
        return self._data.decode("utf-8")

    def get_charset(self) -> None:
        return None


class OutgoingEmail(EmailMultiAlternatives):
    """A Django email whose wire form was built by a MessageLayout.

    Backends that send bytes (SMTP, file, console) use the prebuilt form; backends that read
    fields (django-anymail's ESP APIs) find the usual subject, body, alternatives and headers.
    """

    prebuilt: bytes | None = None
    # The plain SMTP path's: the envelope sender (MAIL FROM; None: the From address) and the
    # DKIM signer (growth.sending.dkim.Signer) to sign the bytes with as they go on the wire.
    envelope_from: str | None = None
    dkim_signer = None

    def add_header(self, name: str, value: str) -> None:
        """Add a header after rendering (a backend's own, e.g. a provider's key header)."""
        _, encoded = forbid_multi_line_headers(name, value, "utf-8")
        self.extra_headers[name] = value
        if self.prebuilt is not None:  # header order is free: put it first
            self.prebuilt = f"{name}: {encoded}{CRLF}".encode() + self.prebuilt

    def message(self):
        if self.prebuilt is None:
            return super().message()
        return PrebuiltBytes(self.prebuilt)


class MessageLayout:
    """The fixed parts of one campaign's messages."""

    def __init__(self, *, from_header: str, has_html: bool) -> None:
        _, self.from_header = forbid_multi_line_headers("From", from_header, "utf-8")
        self.has_html = has_html
        self.boundary = f"==============={secrets.token_hex(12)}=="
        self._date_second = -1
        self._date = ""
        # the fixed lines, joined once: per message only what varies is put between them
        self._from_line = f"From: {self.from_header}{CRLF}"
        self._multipart_head = CRLF.join(self._multipart_header()) + CRLF
        self._text_part = {encoding: f"--{self.boundary}{CRLF}{_TEXT_PART_HEAD[encoding]}{CRLF}"
                           for encoding in _TEXT_PART_HEAD}
        self._html_part = {encoding: CRLF.join([
            f"{CRLF}--{self.boundary}", 'Content-Type: text/html; charset="utf-8"',
            "MIME-Version: 1.0", f"Content-Transfer-Encoding: {encoding}", "", ""])
            for encoding in _TEXT_PART_HEAD}
        self._end = f"{CRLF}--{self.boundary}--{CRLF}"

    def build(self, *, to: str, subject: str, headers: dict[str, str], text: str,
              html: str | None) -> bytes | None:
        """Return the message as CRLF bytes, or None when only Django's builder will do."""
        if not _PLAIN_ADDRESS.match(to):
            return None
        parts_text = _encode_body(text)
        parts_html = _encode_body(html) if html is not None else None
        if parts_text is None or (html is not None and parts_html is None):
            return None
        head = (self._multipart_head if self.has_html
                else _TEXT_PART_HEAD[parts_text[0]])
        header_lines = "".join([f"{name}: {_header_value(name, value)}{CRLF}"
                                for name, value in headers.items()])
        lines = (f"{head}Subject: {_subject_header(subject)}{CRLF}{self._from_line}To: {to}{CRLF}"
                 f"Date: {self._now()}{CRLF}{header_lines}{CRLF}")
        if not self.has_html:
            return (lines + parts_text[1]).encode("utf-8")
        return (lines + self._text_part[parts_text[0]] + parts_text[1]
                + self._html_part[parts_html[0]] + parts_html[1] + self._end).encode("utf-8")

    def _multipart_header(self) -> list[str]:
        return [f'Content-Type: multipart/alternative; boundary="{self.boundary}"',
                "MIME-Version: 1.0"]

    def _now(self) -> str:
        second = int(time.time())
        if second != self._date_second:
            self._date_second = second
            self._date = formatdate(second, localtime=settings.EMAIL_USE_LOCALTIME)
        return self._date


def _text_part_header(transfer_encoding: str) -> list[str]:
    return ['Content-Type: text/plain; charset="utf-8"', "MIME-Version: 1.0",
            f"Content-Transfer-Encoding: {transfer_encoding}"]


# a text part's header lines, each line ended, by its transfer encoding
_TEXT_PART_HEAD = {encoding: CRLF.join(_text_part_header(encoding)) + CRLF
                   for encoding in ("7bit", "8bit")}


def _encode_body(body: str) -> tuple[str, str] | None:
    """Return (Content-Transfer-Encoding, body with CRLF line ends) or None if too unusual."""
    if "\r" in body:
        body = body.replace("\r\n", "\n").replace("\r", "\n")
    ascii_only = body.isascii()
    # a character is at most 4 octets: only a long body has lines worth measuring, and only a
    # long line needs counting octets
    octets_at_most = 1 if ascii_only else 4
    if len(body) * octets_at_most > MAX_LINE:
        lines = body.split("\n")
        if max(map(len, lines)) * octets_at_most > MAX_LINE and any(
                len(line.encode("utf-8")) > MAX_LINE for line in lines):
            return None  # Django switches to quoted-printable for these
    return ("7bit" if ascii_only else "8bit"), body.replace("\n", CRLF)


def _subject_header(subject: str) -> str:
    if "\n" in subject or "\r" in subject:
        raise BadHeaderError(f"Header values can't contain newlines (got {subject!r} for 'Subject')")
    if subject.isascii() and len(subject) < 70:
        return subject
    return Header(subject, "utf-8" if not subject.isascii() else None).encode(linesep=CRLF)


def _header_value(name: str, value: str) -> str:
    if value.isascii() and "\n" not in value and "\r" not in value:
        return value
    return forbid_multi_line_headers(name, value, "utf-8")[1]
