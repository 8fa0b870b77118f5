"""Operator decisions about campaigns. Each one goes through a compare-and-set in the manager;
when the CAS finds the campaign elsewhere, the error says where. Those that put a campaign on
the wire (approve, send now, resume) refuse one whose account's sender would impersonate another
account (``sender_domains.check_outgoing_sender``): it takes that sender when it starts or
resumes."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError

from growth.deliverability.sender_domains import ImpersonatingSender, check_outgoing_sender
from growth.managers.campaigns import Cancelled
from growth.models import Campaign
from growth.sending.rendering import check_content


class TransitionRefused(Exception):
    """The campaign is not in a state that allows this transition (or was moved meanwhile)."""


def approve_campaign(*, campaign_id: int, send_now: bool = False,
                     version: datetime | None = None) -> None:
    """draft -> approved, due at its scheduled time (or at once: ``send_now``); ``version``: only
    if the campaign is still that one (its ``updated_at``, as an operator saw it). Raise
    ValidationError for unsendable content, TransitionRefused else."""
    campaign = _get(campaign_id)
    if version is not None and campaign.updated_at != version:
        raise TransitionRefused(f"“{campaign}” was changed since it was shown: look at it again.")
    if campaign.status != Campaign.Status.DRAFT:
        raise TransitionRefused(f"“{campaign}” is {campaign.status}, not draft.")
    check_content(subject=campaign.subject, body_text=campaign.body_text,
                  body_html=campaign.body_html)
    _check_sender(campaign)
    if campaign.scheduled_for is None and not send_now:
        raise ValidationError({"scheduled_for": "Set when the campaign should go out, or send "
                                                "it now."})
    if not Campaign.objects.approve(campaign_id=campaign.id, version=campaign.updated_at,
                                    send_now=send_now):
        raise TransitionRefused(_moved(campaign, "approved"))


def send_now(*, campaign_id: int, expected: str | None = None,
             version: datetime | None = None) -> None:
    """A draft is approved due at once; an approved campaign scheduled later becomes due now.
    ``expected``, ``version``: only if it is still that status and that version. Raise
    ValidationError for an unsendable campaign, TransitionRefused else."""
    campaign = _get(campaign_id)
    if expected is not None and campaign.status != expected:
        raise TransitionRefused(f"“{campaign}” is {campaign.status} now, not {expected}.")
    if campaign.status == Campaign.Status.DRAFT:
        approve_campaign(campaign_id=campaign_id, send_now=True, version=version)
        return
    _check_sender(campaign)
    if not Campaign.objects.bring_forward(campaign_id=campaign_id):
        current = Campaign.objects.status_of(campaign_id=campaign_id)
        if current == Campaign.Status.APPROVED:
            raise TransitionRefused(f"“{campaign}” is already due: the worker starts it at its "
                                    "next pass.")
        raise TransitionRefused(f"“{campaign}” is {current}: only a draft or an approved campaign "
                                "can be sent now.")


def pause_campaign(*, campaign_id: int) -> None:
    if not Campaign.objects.pause(campaign_id=campaign_id):
        raise TransitionRefused(_moved(_get(campaign_id), "paused", expected="sending"))


def resume_campaign(*, campaign_id: int) -> None:
    """paused -> sending, as its account's sender now. Raise ValidationError when that sender
    impersonates another account, TransitionRefused when the campaign is not paused."""
    _check_sender(_get(campaign_id))
    if not Campaign.objects.resume(campaign_id=campaign_id):
        raise TransitionRefused(_moved(_get(campaign_id), "resumed", expected="paused"))


def cancel_campaign(*, campaign_id: int, expected: str | None = None) -> Cancelled:
    """Cancel (``expected``: only from that status); return what became of its queued
    recipients."""
    cancelled = Campaign.objects.cancel(campaign_id=campaign_id, expected=expected)
    if cancelled is None:
        raise TransitionRefused(_moved(_get(campaign_id), "cancelled"))
    return cancelled


def sender_warning(*, campaign: Campaign) -> str:
    """For the page that confirms putting the campaign on the wire: what the rule says of the
    sender it would take (its account's). Why it cannot go out, or that the rule refuses it to
    the account's members, though it goes out (an operator may have proved the domain by other
    means); "" when the rule allows it."""
    address = campaign.account.from_email
    try:
        refusal = check_outgoing_sender(account_id=campaign.account_id, address=address)
    except ImpersonatingSender as exc:
        return f"It cannot go out: {exc}"
    if refusal is None:
        return ""
    return (f"Its sender {address} is one the rule refuses to the account's members; it goes "
            f"out as that sender all the same. {refusal.reason}")


def _check_sender(campaign: Campaign) -> None:
    """Raise ValidationError when the sender the campaign would take (its account's) is on
    another account's verified domain."""
    try:
        check_outgoing_sender(account_id=campaign.account_id,
                             address=campaign.account.from_email)
    except ImpersonatingSender as exc:
        raise ValidationError(f"It cannot go out: {exc}") from None


def _get(campaign_id: int) -> Campaign:
    try:
        return Campaign.objects.get(id=campaign_id)
    except Campaign.DoesNotExist:
        raise TransitionRefused(f"There is no campaign {campaign_id}.") from None


def _moved(campaign: Campaign, verb: str, expected: str | None = None) -> str:
    current = Campaign.objects.status_of(campaign_id=campaign.id)
    if expected and current != expected:
        return f"“{campaign}” is {current}: only a {expected} campaign can be {verb}."
    if current in (Campaign.Status.SENT, Campaign.Status.CANCELLED):
        return f"“{campaign}” is {current}: it cannot be {verb}."
    return f"“{campaign}” changed while being {verb} (now {current}); try again."
