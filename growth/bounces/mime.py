"""What the bounce parsers share: reading a message, walking its report parts, header blocks,
field values and dates, all tolerant of what real mail systems send."""

from __future__ import annotations

import base64
import binascii
import contextlib
import email
import quopri
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from email.message import Message
from email.parser import HeaderParser
from email.utils import parsedate_to_datetime

# Parts never searched for a report: the returned message may itself be anything.
EARLIEST = datetime(1990, 1, 1, tzinfo=UTC)  # a date in mail before this is none
NUL = "\x00"  # dropped from all text read here: PostgreSQL refuses it in text
_ENCLOSED = {"message/rfc822", "message/global", "text/rfc822-headers", "message/global-headers"}


def read(raw: bytes | Message) -> Message:
    """The message, parsed leniently (compat32: defects are noted, never raised)."""
    return raw if isinstance(raw, Message) else email.message_from_bytes(raw)


def report_parts(message: Message) -> Iterator[Message]:
    """Every leaf and multipart of the message, not descending into an enclosed message."""
    yield message
    if message.get_content_maintype() == "multipart" and message.is_multipart():
        for part in message.get_payload():
            if isinstance(part, Message):
                yield from report_parts(part)


def find_part(message: Message, *content_types: str) -> Message | None:
    for part in report_parts(message):
        if part.get_content_type() in content_types:
            return part
    return None


def enclosed(message: Message) -> Message | None:
    """The returned original (message/rfc822, or only its headers), if the report has one."""
    for part in report_parts(message):
        kind = part.get_content_type()
        if kind not in _ENCLOSED:
            continue
        payload = part.get_payload()
        if isinstance(payload, list) and payload and isinstance(payload[0], Message):
            return payload[0]
        return HeaderParser().parsestr(body_text(part))
    return None


def header_blocks(part: Message) -> list[Message]:
    """The blocks of header fields of a message/delivery-status or message/feedback-report part
    (RFC 3464 §2.1, RFC 5965 §3): parsed by the email package when it recognized them, read
    from the decoded body otherwise (a transfer encoding, message/global-delivery-status)."""
    payload = part.get_payload()
    blocks: list[Message] = []
    encoding = field(part, "Content-Transfer-Encoding").lower()
    if isinstance(payload, list) and encoding in ("base64", "quoted-printable"):
        # the email package split the still-encoded text into blocks: decode it whole instead
        body = part.as_bytes().replace(b"\r\n", b"\n").partition(b"\n\n")[2]
        try:
            decoded = (base64.b64decode(body) if encoding == "base64"
                       else quopri.decodestring(body))
        except (binascii.Error, ValueError):
            return []
        return split_blocks(decoded.decode("utf-8", errors="replace"))
    if isinstance(payload, list):
        for block in payload:
            if not isinstance(block, Message):
                continue
            if block.keys():
                blocks.append(block)
            # what follows the first block when the email package took the part for one
            # message (message/global-delivery-status): as bytes, 8-bit ones unharmed
            rest = None if block.is_multipart() else block.get_payload(decode=True)
            if rest and rest.strip():
                blocks.extend(split_blocks(rest.decode("utf-8", errors="replace")))
        return blocks
    return split_blocks(body_text(part))


def split_blocks(text: str) -> list[Message]:
    text = text.replace("\r\n", "\n")
    blocks = []
    for chunk in text.split("\n\n"):
        if chunk.strip():
            block = HeaderParser().parsestr(chunk.strip("\n") + "\n")
            if block.keys():
                blocks.append(block)
    return blocks


def body_text(part: Message) -> str:
    """The decoded text of a leaf part (any charset, bad bytes replaced; a charset that is no
    text encoding, or that refuses even with errors replaced, as idna and punycode do: UTF-8)."""
    payload = part.get_payload(decode=True)
    if payload is None:
        payload = part.get_payload()
        return payload.replace(NUL, "") if isinstance(payload, str) else ""
    charset = part.get_content_charset() or "utf-8"
    try:
        decoded = payload.decode(charset, errors="replace")
    except (LookupError, UnicodeError):
        decoded = payload.decode("utf-8", errors="replace")
    return decoded.replace(NUL, "")


def field(block: Message, name: str) -> str:
    """A field's value (the first), unfolded, as text ("" when absent)."""
    found = fields(block, name)
    return found[0] if found else ""


def fields(block: Message, name: str) -> list[str]:
    # raw_items: the values as received, 8-bit (UTF-8) ones included, which get() would wrap
    name = name.lower()
    return [text(value) for key, value in block.raw_items() if key.lower() == name]


def text(value: object) -> str:
    """A header value as one line of text: raw UTF-8 and RFC 2047 words decoded (a malformed
    word left as it came), folding, NULs and undecodable bytes gone."""
    if value is None:
        return ""
    raw = str(value).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    with contextlib.suppress(LookupError, UnicodeError, ValueError, TypeError, HeaderParseError):
        raw = str(make_header(decode_header(raw)))
    return " ".join(raw.replace(NUL, "").split())


def typed_address(value: str) -> str | None:
    """The address of an RFC 3464 address field ("rfc822; user@example.com", also "utf-8;"),
    without its type and angle brackets; None when there is none."""
    kind, sep, address = value.partition(";")
    if not sep:
        address = kind
    address = address.strip().strip("<>").strip()
    return address if "@" in address else None


def date(value: str) -> datetime | None:
    """A date header's moment, in UTC; None for one no mail could carry (before 1990 or past
    tomorrow): "Fri, 31 Dec 9999 23:00:00 -0500" is the year 10,000 in UTC, which PostgreSQL
    stored and then could not read back, breaking every page that lists the event."""
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value)
        moment = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return moment if EARLIEST <= moment <= datetime.now(UTC) + timedelta(days=1) else None
