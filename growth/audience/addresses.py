"""Email addresses: validation and the dedup key ``email_lower``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import email_validator
from django.core.exceptions import ValidationError
from email_validator import EmailNotValidError, validate_email
from email_validator.rfc_constants import DOT_ATOM_TEXT, EMAIL_MAX_LENGTH
from email_validator.syntax import validate_email_domain_name

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
    common = _common_address(email)
    return common if common is not None else _validated(email, raw=raw)


def _validated(email: str, *, raw: str) -> Address:
    """The address as validate_email reads it, whole."""
    try:
        checked = validate_email(email, check_deliverability=False, allow_smtputf8=True)
    except EmailNotValidError as exc:
        raise ValidationError("%(value)r is not a valid email address: %(reason)s",
                              code="invalid_email", params={"value": raw, "reason": exc}) from exc
    domain = (checked.ascii_domain or checked.domain).lower()
    return Address(email=email, email_lower=f"{checked.local_part.translate(_ASCII_LOWER)}@{domain}")


def _common_address(email: str) -> Address | None:
    """The address, when it is of the common kind (ASCII, a plain local part, a domain name)
    and valid; None for any other, which validate_email reads whole. The same verdict and key
    as validate_email's (tests/test_addresses.py checks it), from email_validator's own parts,
    with the domain read once per domain: a list of 900,000 addresses spent three quarters of
    its validation on the same few domains' characters (48 s for a 20 MB file, past the web
    server's 30 s)."""
    local, at, domain = email.partition("@")
    if not (at and email.isascii() and DOT_ATOM_TEXT.match(local)) or "@" in domain:
        return None
    checked = _domain(domain)
    if checked is None:
        return None
    ascii_domain, unicode_domain = checked
    if len(local) + 1 + max(len(domain), len(ascii_domain), len(unicode_domain)) > EMAIL_MAX_LENGTH:
        return None
    return Address(email=email, email_lower=f"{local.translate(_ASCII_LOWER)}@{ascii_domain.lower()}")


@lru_cache(maxsize=4096)
def _domain(domain: str) -> tuple[str, str] | None:
    """The domain name's IDNA and Unicode forms as validate_email reads them (None: it refuses
    it, or it is a bracketed address: validate_email then says why)."""
    if not domain or domain.startswith("["):
        return None
    try:
        info = validate_email_domain_name(domain, test_environment=email_validator.TEST_ENVIRONMENT,
                                          globally_deliverable=email_validator.GLOBALLY_DELIVERABLE)
    except EmailNotValidError:
        return None
    return info["ascii_domain"], info["domain"]


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
