"""An ESP's tracking event as evidence about a send in doubt (growth.feedback.events finds the
send through our ledger first).

The ESP taking the message settles it 'sent': a delivery, and also the ESP's own acceptance
(anymail's ``sent``: Amazon SES Send, Resend email.sent; ``queued``: SendGrid processed,
Mailgun accepted), because 'sent' means here what it means for every other row: the relay
accepted the message, as the worker records on a 250 (a later bounce is feedback on a sent
row, as for any other). A refusal or a bounce settles it 'failed': the ESP will not deliver
that message. A delay settles nothing: the final event will.

A send queued again while in doubt (an operator's retry under the same key, or a lost worker's)
is in doubt too until a claim takes it: the message the event names may be the one that went
into doubt, and settled 'sent', it does not go out a second time. A refusal or a bounce leaves it
to go (the bounce's suppression stops it at the claim).
"""

from __future__ import annotations

from anymail.signals import AnymailTrackingEvent, EventType

from growth.managers.feedback import SendRecord
from growth.models import Send, SendVerdict

MAX_TEXT = 1000  # characters kept of the ESP's description and MTA response
# the statuses of a send an event may settle; which of them are in doubt, the settle decides
# (growth/managers/verdicts.sql, _settled_by_evidence)
MAY_BE_IN_DOUBT = (Send.Status.UNKNOWN, Send.Status.QUEUED)

_SETTLES = {
    EventType.DELIVERED: SendVerdict.Verdict.SENT,
    EventType.SENT: SendVerdict.Verdict.SENT,
    EventType.QUEUED: SendVerdict.Verdict.SENT,
    EventType.COMPLAINED: SendVerdict.Verdict.SENT,  # a recipient complained: it arrived
    EventType.BOUNCED: SendVerdict.Verdict.FAILED,
    EventType.REJECTED: SendVerdict.Verdict.FAILED,
    EventType.FAILED: SendVerdict.Verdict.FAILED,
}


def settles_as(event: AnymailTrackingEvent) -> str | None:
    """The verdict this kind of event gives a send in doubt, or None."""
    return _SETTLES.get(event.event_type)


def settle_in_doubt(*, esp_name: str, event: AnymailTrackingEvent, send: SendRecord) -> str | None:
    """Settle the event's send if it is in doubt; return the verdict given, or None (not in doubt,
    or settled meanwhile by someone else, or an event that settles nothing)."""
    verdict = settles_as(event)
    if verdict is None or send.status not in MAY_BE_IN_DOUBT:
        return None
    moved = SendVerdict.objects.settle_unknown({send.send_id: evidence_of(esp_name, event)},
                                               verdict=verdict, decided_by=f"esp:{esp_name}",
                                               queued_again=True)
    return verdict if moved else None


def evidence_of(esp_name: str, event: AnymailTrackingEvent) -> str:
    head = f"{esp_name} {event.event_type} event {event.event_id or '(without an id)'}"
    if event.timestamp:
        head += f" at {event.timestamp.isoformat()}"
    lines = [head.replace("\x00", "")]
    for name, value in (("message id", event.message_id), ("MTA response", event.mta_response),
                        ("description", event.description)):
        text = str(value or "").replace("\x00", "").strip()[:MAX_TEXT]
        if text:
            lines.append(f"{name}: {text}")
    return "\n".join(lines)
