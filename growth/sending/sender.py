"""A tenant's sender (display name and address) as it may stand in a From header.

Checked where it is typed (the account's form) and again where it is used (each campaign's
renderer), since rows saved before a rule existed, or by other means, reach the worker too.
An internationalised domain is sent in its IDNA form (``news@bücher.example`` goes out as
``news@xn--bcher-kva.example``); a non-ASCII local part is refused: it needs SMTPUTF8 from every
server on the way, which a bulk sender cannot count on.
"""

from __future__ import annotations

import unicodedata
from email.utils import formataddr

from django.core.exceptions import ValidationError
from email_validator import EmailNotValidError, validate_email

MAX_DISPLAY_NAME = 200  # characters: with the address, well under a header line's 998 octets


def validate_display_name(value: str) -> None:
    """Refuse a display name that cannot stand in a header: a line break, NUL or other control
    character (a header injection), or one too long."""
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValidationError("The sender name must be one line of text: it contains a line break "
                              "or another control character.", code="header_unsafe")
    if len(value) > MAX_DISPLAY_NAME:
        raise ValidationError(f"The sender name is longer than {MAX_DISPLAY_NAME} characters.",
                              code="too_long")


def sender_address(value: str) -> str:
    """Return the address as it goes on the wire (domain in IDNA form), or raise
    ValidationError saying why it cannot be a sender."""
    try:
        checked = validate_email(value.strip(), check_deliverability=False, allow_smtputf8=True)
    except EmailNotValidError as exc:
        raise ValidationError(f"{value!r} is not a valid sender address: {exc}",
                              code="invalid_email") from exc
    if checked.ascii_email is None:
        raise ValidationError(
            f"{value!r} cannot be a sender address: the part before the @ must be ASCII "
            "(non-ASCII needs SMTPUTF8 from every mail server on the way).", code="smtputf8")
    return checked.ascii_email


def validate_sender_address(value: str) -> None:
    sender_address(value)


def from_header(*, name: str, address: str) -> str:
    """Return the From header's value for a sender, or raise ValidationError."""
    validate_display_name(name)
    return formataddr((name, sender_address(address)), charset="utf-8")


def as_read(*, name: str, address: str) -> str:
    """A sender as an operator reads it: ``Name <address>``, unencoded and unchecked."""
    return f"{name} <{address}>" if name else address
