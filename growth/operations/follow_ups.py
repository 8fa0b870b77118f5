"""Recoverable campaigns: a follow-up that resends to the recipients a campaign did not reach,
and a plain clone.

A follow-up is an ordinary draft (edit it, approve it) that remembers what it resends. Its
audience is decided at build time, in the database (SendManager._build_follow_up): the original's
rows that did not get the message are taken from it in the statement that creates the
follow-up's rows, so no address the original sent to, and none another follow-up took, can be
added, whatever runs at the same time.
"""

from __future__ import annotations

from django.db import transaction

from growth.managers.sends import ResendAudience
from growth.models import Campaign, Send
from growth.operations.campaigns import TransitionRefused

RESENDABLE = (Campaign.Status.SENT, Campaign.Status.CANCELLED, Campaign.Status.PAUSED)
MAX_NAME = Campaign._meta.get_field("name").max_length


def resend_refusal(campaign: Campaign) -> str | None:
    """Why no follow-up of ``campaign`` can be made now, or None."""
    if campaign.status not in RESENDABLE:
        return (f"“{campaign}” is {campaign.status}: only a sent, cancelled or paused campaign can "
                "be resent to the rest.")
    if campaign.recipients_built_at is None:
        return f"“{campaign}” never built its recipient list: clone it instead."
    return None


def resend_audience(campaign: Campaign) -> ResendAudience:
    return Send.objects.resend_audience(campaign_id=campaign.id, root_id=_root_id(campaign))


def create_follow_up(*, campaign_id: int, include_unknown: bool = False,
                     include_new_subscribers: bool = False, name: str = "") -> Campaign:
    """Create a draft that will resend ``campaign_id`` to those it did not reach."""
    original = _get(campaign_id)
    refusal = resend_refusal(original)
    if refusal:
        raise TransitionRefused(refusal)
    with transaction.atomic():
        follow_up = _copy(original, name or f"{original.name} — resend to the rest",
                          resend_of=original, resend_root_id=_root_id(original),
                          resend_unknown=include_unknown,
                          resend_new_subscribers=include_new_subscribers)
    return follow_up


def clone_campaign(*, campaign_id: int) -> Campaign:
    """A new draft with the same content and segments, for the whole audience."""
    original = _get(campaign_id)
    with transaction.atomic():
        return _copy(original, clone_name(original))


def clone_name(original: Campaign) -> str:
    return f"Copy of {original.name}"[:MAX_NAME]


def _copy(original: Campaign, name: str, **extra) -> Campaign:
    copy = Campaign.objects.create(
        account_id=original.account_id, name=name[:MAX_NAME], subject=original.subject,
        body_text=original.body_text, body_html=original.body_html, **extra)
    copy.segments.set(original.segments.all())
    return copy


def _root_id(campaign: Campaign) -> int:
    return campaign.resend_root_id or campaign.id


def _get(campaign_id: int) -> Campaign:
    try:
        return Campaign.objects.get(id=campaign_id)
    except Campaign.DoesNotExist:
        raise TransitionRefused(f"There is no campaign {campaign_id}.") from None
