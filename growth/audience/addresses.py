"""Email addresses: validation and the dedup key ``email_lower``."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ValidationError
from email_validator import EmailNotValidError, validate_email

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# Such an address is valid, and may be suppressed, but not mailed: Django's SMTP client encodes
# its local part as an RFC 2047 word, a mailbox that does not exist, and a bulk sender cannot
# count on SMTPUTF8 from every server on the way.
SMTPUTF8_REFUSAL = ("its part before the @ is not ASCII: mail to it needs SMTPUTF8 from every "
                    "mail server on the way, which this sender does not use")


@dataclass(frozen=True, slots=True)
class Address:
    email: str  # as entered, trimmed
    email_lower: str  # the dedup key


def parse_address(raw: str) -> Address:
    """Return the address and its dedup key, or raise ValidationError saying what is wrong.

    The key is the trimmed address with its domain IDNA-encoded and lower-cased and its local part
    lower-cased in ASCII only (a non-ASCII local part keeps its other characters as they are).
    """
    email = (raw or "").strip()
    if any(ch in email for ch in "\r\n\0"):
        raise ValidationError("%(value)r is not a valid email address: it contains a line break.",
                              code="invalid_email", params={"value": raw})
    try:
        checked = validate_email(email, check_deliverability=False, allow_smtputf8=True)
    except EmailNotValidError as exc:
        raise ValidationError("%(value)r is not a valid email address: %(reason)s",
                              code="invalid_email", params={"value": raw, "reason": exc}) from exc
    domain = (checked.ascii_domain or checked.domain).lower()
    return Address(email=email, email_lower=f"{checked.local_part.translate(_ASCII_LOWER)}@{domain}")


def email_lower(raw: str) -> str:
    """Return the dedup key of ``raw`` (see parse_address)."""
    return parse_address(raw).email_lower


def on_the_wire(email: str) -> str:
    """The (valid, ASCII-local) address as mail to it is addressed: its domain in the IDNA form
    its dedup key has (IDNA 2008, as email_validator and the registries read it). Left to
    Django, a domain is encoded with Python's codec, IDNA 2003, which reads ``straße.de`` as
    ``strasse.de`` and drops a joiner (U+200C, U+200D): another mailbox than the key names, so
    two keys reached one mailbox and a suppression of it did not stop the other."""
    if email.isascii():
        return email
    return validate_email(email, check_deliverability=False, allow_smtputf8=True).ascii_email


def needs_smtputf8(email: str) -> bool:
    """Whether mail to this (valid) address needs SMTPUTF8: see SMTPUTF8_REFUSAL."""
    return not email.rpartition("@")[0].isascii()
