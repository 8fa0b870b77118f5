"""Signed unsubscribe tokens and the links that carry them.

A token names (account, subscriber, campaign), is signed with a purpose-specific salt, never
expires (a link in a months-old email must still work) and survives a SECRET_KEY rotation through
SECRET_KEY_FALLBACKS.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.urls import reverse

SALT = "growth.unsubscribe.v1"
_PLACEHOLDER = "TOKEN"


@dataclass(frozen=True, slots=True)
class UnsubscribeTarget:
    account_id: int
    subscriber_id: int
    campaign_id: int | None


class BadToken(Exception):
    """The token was tampered with, truncated, or is not one of ours."""


def make_token(*, account_id: int, subscriber_id: int, campaign_id: int | None) -> str:
    return signing.Signer(salt=SALT).sign_object([account_id, subscriber_id, campaign_id])


def read_token(token: str) -> UnsubscribeTarget:
    """Return what the token names, or raise BadToken."""
    try:
        account_id, subscriber_id, campaign_id = signing.Signer(salt=SALT).unsign_object(token)
    except (signing.BadSignature, ValueError, TypeError, UnicodeError) as exc:
        raise BadToken(str(exc)) from exc
    if not (isinstance(account_id, int) and isinstance(subscriber_id, int)
            and (campaign_id is None or isinstance(campaign_id, int))):
        raise BadToken("malformed payload")
    return UnsubscribeTarget(account_id, subscriber_id, campaign_id)


class LinkMaker:
    """Build absolute unsubscribe URLs fast: the URL pattern is reversed once, not per message."""

    def __init__(self, site_url: str | None = None) -> None:
        base = (site_url or settings.SITE_URL).rstrip("/")
        self._prefix, self._suffix = (
            base + reverse("growth:unsubscribe", args=[_PLACEHOLDER])).split(_PLACEHOLDER)

    def url(self, *, account_id: int, subscriber_id: int, campaign_id: int | None) -> str:
        token = make_token(account_id=account_id, subscriber_id=subscriber_id,
                           campaign_id=campaign_id)
        return f"{self._prefix}{token}{self._suffix}"
