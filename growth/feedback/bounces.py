"""Which feedback suppresses an address: hard vs soft, per ESP, and our own relay's refusals.

anymail normalizes each ESP's events (``anymail.signals.EventType``), but calls some soft bounces
"bounced" (Amazon SES ``Transient``, Postmark ``SoftBounce``, SendGrid blocks, Resend
``Transient``) and leaves Amazon SES's ``DeliveryDelay`` "unknown". The ESP's own payload
(``event.esp_event``) settles those. A bounce its ESP calls transient, undetermined or blocked is
only recorded: a wrongly suppressed address is lost for good, and the ESP reports it again if
it keeps failing.

On the SMTP path the relay's own refusal is the bounce: a permanent reply whose enhanced status
says the address is bad (5.1.x) or its mailbox disabled (5.2.1) suppresses it, as an ESP's hard
bounce does (``smtp_hard_bounce``). A policy refusal (5.7.x), a full mailbox (5.2.2) or a reply
without an enhanced status says nothing certain about the address, and is only recorded.
The same rule reads the DSNs that come back by mail (``dsn_hard_bounce``, ESP name ``mailbox``,
see ``growth.bounces``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from anymail.signals import AnymailTrackingEvent, EventType, RejectReason

from growth.models import Suppression

# Events worth a row: bad news about a delivery. Deliveries, opens and clicks are not kept.
RECORDED = {EventType.BOUNCED, EventType.DEFERRED, EventType.REJECTED, EventType.FAILED,
            EventType.COMPLAINED, EventType.UNSUBSCRIBED}

# The ESP refused to send because of the address's history: the same verdict as that history.
_REJECTED_BECAUSE = {
    RejectReason.BOUNCED: Suppression.Reason.BOUNCED,
    RejectReason.SPAM: Suppression.Reason.COMPLAINED,
    RejectReason.UNSUBSCRIBED: Suppression.Reason.UNSUBSCRIBED,
}


# A reply as stored by growth.sending.transports.errors: "550 5.1.1 No such user"
_SMTP_REPLY = re.compile(r"5\d\d (5)\.(\d{1,3})\.(\d{1,3})(?=\s|$)")
# 5.1.7 and 5.1.8 are about the sender's address, not the recipient's
_NOT_THE_RECIPIENT = {"5.1.7", "5.1.8"}


def smtp_hard_bounce(error: str) -> bool:
    """Does this stored SMTP refusal say the recipient's address can never be delivered to?"""
    reply = _SMTP_REPLY.match(error)
    if reply is None:
        return False
    status = ".".join(reply.groups())
    if status in _NOT_THE_RECIPIENT:
        return False
    return reply[2] == "1" or status == "5.2.1"


@dataclass(frozen=True, slots=True)
class EventVerdict:
    event_type: str  # anymail's, corrected where the payload says otherwise
    reject_reason: str  # anymail's RejectReason, or ""
    suppress: str | None  # a Suppression.Reason, or None: record only


def classify_event(esp_name: str, event: AnymailTrackingEvent) -> EventVerdict | None:
    """Return what to do with the event, or None if it is not worth recording."""
    raw = event.esp_event if isinstance(event.esp_event, dict) else {}
    event_type = event.event_type
    if (esp_name, event_type, raw.get("eventType")) == ("Amazon SES", EventType.UNKNOWN,
                                                        "DeliveryDelay"):
        event_type = EventType.DEFERRED
    if event_type not in RECORDED:
        return None
    reason = _REJECT_REASON.get(esp_name, _anymail_reject_reason)(event, raw) or ""
    suppress = None
    if event_type == EventType.BOUNCED:
        suppress = _BOUNCE.get(esp_name, _hard_by_reject_reason)(event, raw)
    elif event_type == EventType.COMPLAINED:
        # Postmark's SpamNotification is a receiving server's filter, not the recipient.
        if not (esp_name == "Postmark" and raw.get("RecordType") == "Bounce"):
            suppress = Suppression.Reason.COMPLAINED
    elif event_type == EventType.UNSUBSCRIBED:
        suppress = Suppression.Reason.UNSUBSCRIBED
    elif event_type == EventType.REJECTED:
        suppress = _REJECTED_BECAUSE.get(reason)
    return EventVerdict(event_type=event_type, reject_reason=reason, suppress=suppress)


# How each ESP tells a hard bounce: the Suppression.Reason a bounced event calls for, or None.
Bounce = Callable[[AnymailTrackingEvent, dict], str | None]


def _hard_by_reject_reason(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # Mailgun: anymail turns "temporary" failures into deferred and gives reason "bounced" to
    # permanent ones that are bounces (reasons bounce, suppress-bounce), "other" to the rest.
    if event.reject_reason in (None, RejectReason.BOUNCED):
        return Suppression.Reason.BOUNCED
    return _REJECTED_BECAUSE.get(event.reject_reason)


def _amazon_ses(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # bounceType is Permanent, Transient or Undetermined
    bounce = raw.get("bounce") or {}
    return Suppression.Reason.BOUNCED if bounce.get("bounceType") == "Permanent" else None


def _postmark(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # A Bounce record's Type (HardBounce, SoftBounce, VirusNotification…), or a SubscriptionChange
    # that deactivated the address after a hard bounce.
    kind = raw.get("Type") or raw.get("SuppressionReason")
    return Suppression.Reason.BOUNCED if kind == "HardBounce" else None


def _sendgrid(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # A bounce event's type is "bounce" or "blocked" (the receiver refused for now: not the address)
    return None if raw.get("type") == "blocked" else Suppression.Reason.BOUNCED


def _resend(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # email.bounced is documented as permanent, yet its bounce.type may say Transient/Undetermined
    bounce = (raw.get("data") or {}).get("bounce") or {}
    return Suppression.Reason.BOUNCED if bounce.get("type", "Permanent") == "Permanent" else None


def _mailgun(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # A permanent failure because Mailgun's own list has a complaint or an opt-out for the address.
    reason = (raw.get("event-data") or {}).get("reason")
    if reason == "suppress-complaint":
        return Suppression.Reason.COMPLAINED
    if reason == "suppress-unsubscribe":
        return Suppression.Reason.UNSUBSCRIBED
    return _hard_by_reject_reason(event, raw)


# DSNs that came back by mail (growth.bounces): the same rule as our relay's own refusals. An MTA
# that reports only the class (Exim always says 5.0.0) may quote the specific code in the reply
# it got, which then counts.
_ENHANCED_STATUS = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])")
_REPLY_STATUS = re.compile(r"(?<![\d.])([245])\d\d[ -]([245]\.\d{1,3}\.\d{1,3})(?![\d.])")


def dsn_status(status: str, diagnostic_code: str = "") -> str:
    """The most specific enhanced status code a DSN's recipient block gives ("" if none): its
    Status, or the code in its Diagnostic-Code reply when the Status says only the class."""
    reported = _ENHANCED_STATUS.search(status or "")
    code = reported[0] if reported else ""
    if code and not code.endswith(".0.0"):
        return code
    reply = _REPLY_STATUS.search(diagnostic_code or "")
    if reply is None:
        # "smtp; 5.1.1 <…>… User unknown": a code right after the diagnostic type
        reply_text = (diagnostic_code or "").partition(";")[2] or diagnostic_code or ""
        leading = _ENHANCED_STATUS.match(reply_text.strip())
        quoted = leading[0] if leading else ""
    else:
        quoted = reply[2] if reply[1] == reply[2][0] else ""
    if quoted and (not code or quoted[0] == code[0]):
        return quoted
    return code


def dsn_hard_bounce(status: str, diagnostic_code: str = "") -> bool:
    """Does this failed recipient's status say the address can never be delivered to? 5.1.x
    (not 5.1.7/5.1.8, the sender's address) and 5.2.1, as for our relay's own refusals."""
    code = dsn_status(status, diagnostic_code)
    if not code.startswith("5.") or code in _NOT_THE_RECIPIENT:
        return False
    return code.split(".")[1] == "1" or code == "5.2.1"


def _mailbox(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # raw: what growth.bounces.record read from the DSN's recipient block
    hard = dsn_hard_bounce(str(raw.get("status", "")), str(raw.get("diagnostic_code", "")))
    return Suppression.Reason.BOUNCED if hard else None


_BOUNCE: dict[str, Bounce] = {
    "Amazon SES": _amazon_ses,
    "mailbox": _mailbox,
    "Mailgun": _mailgun,
    "Postmark": _postmark,
    "Resend": _resend,
    "SendGrid": _sendgrid,
}


def _anymail_reject_reason(event: AnymailTrackingEvent, raw: dict) -> str | None:
    return event.reject_reason


def _sendgrid_reject_reason(event: AnymailTrackingEvent, raw: dict) -> str | None:
    # anymail knows "Bounced Address" and "Unsubscribed Address" but not this drop reason
    if str(raw.get("reason", "")).lower() == "spam reporting address":
        return RejectReason.SPAM
    return event.reject_reason


_REJECT_REASON = {"SendGrid": _sendgrid_reject_reason}
