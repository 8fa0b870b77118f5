"""VERP: the envelope sender (Return-Path) of each message names its send, signed, so that a
bounce finds its send without trusting anything the bounce itself says.

    bounces+<campaign id>.<subscriber id>.<signature>@<BOUNCE_DOMAIN>

The signature is an HMAC of the job key under SECRET_KEY (any of SECRET_KEY_FALLBACKS still
verifies, so a key rotation does not orphan the bounces of messages already out), in lowercase
hex: some relays fold the case of local parts. Off (None) when BOUNCE_DOMAIN is not set.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re

from django.conf import settings

from growth.job_ids import JobKey, parse_job_id

SALT = "growth.sending.verp"
SIGNATURE_LENGTH = 20  # hex characters: 80 bits
# Bounded parts (a local part is at most 64 octets, a domain 255): searched in anyone's text, an
# unbounded local part was tried again from every position of a long token without "+".
_ADDRESS = re.compile(r"(?P<local>[^+@\s]{1,64})\+(?P<cid>\d{1,18})\.(?P<sid>\d{1,18})\."
                      r"(?P<sig>[0-9a-f]{1,64})@(?P<domain>[^@\s>]{1,255})", re.IGNORECASE)


def return_path(job_id: str) -> str | None:
    """The envelope sender for this job's message, or None when VERP is off."""
    domain = settings.BOUNCE_DOMAIN
    if not domain:
        return None
    key = parse_job_id(job_id)
    if key is None:
        return None
    token = f"{key.campaign_id}.{key.subscriber_id}"
    return f"{settings.BOUNCE_LOCAL_PART}+{token}.{_signature(token, settings.SECRET_KEY)}@{domain}"


def job_of(address: str) -> JobKey | None:
    """The job a bounce address of ours names, if its signature holds; None for anything else
    (another address, a forged or damaged token, another bounce domain)."""
    match = _ADDRESS.search(address.strip().strip("<>"))
    if match is None or not settings.BOUNCE_DOMAIN:
        return None
    if (match["local"].lower() != settings.BOUNCE_LOCAL_PART.lower()
            or match["domain"].lower().rstrip(".") != settings.BOUNCE_DOMAIN.lower()):
        return None
    token = f"{int(match['cid'])}.{int(match['sid'])}"
    given = match["sig"].lower()
    for secret in (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS):
        if hmac.compare_digest(given, _signature(token, secret)):
            return JobKey(int(match["cid"]), int(match["sid"]))
    return None


def _signature(token: str, secret: str) -> str:
    """Django's ``salted_hmac(SALT, token, secret=secret, algorithm="sha256")``, truncated, with
    its key derived once per secret instead of once per message."""
    return hmac.digest(_salted_key(secret), token.encode(), "sha256").hex()[:SIGNATURE_LENGTH]


@functools.lru_cache(maxsize=8)  # SECRET_KEY and its fallbacks
def _salted_key(secret: str) -> bytes:
    return hashlib.sha256((SALT + secret).encode()).digest()  # as salted_hmac derives it
