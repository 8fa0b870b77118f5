"""ESP feedback (anymail's tracking webhooks) -> the tenant's suppressions.

A hard bounce, a complaint or an opt-out suppresses the address for the tenant whose message it
was (a complaint or an opt-out also marks its subscriber rows unsubscribed); soft bounces and
delays are only recorded (see ``growth.feedback.bounces``). Each event acts once: its row is
inserted with ON CONFLICT DO NOTHING, and only the insert that created it goes on to suppress, in the same
transaction.

The tenant is never taken from the payload: it is the account of the send the event names in
our ledger (``attribute``). An event that names no send of ours, or contradicts the one it
names, is recorded unattributed and suppresses nothing; one with no usable address is logged
and dropped. Either way anymail answers 200 and the ESP does not post it again.

An event about a send in doubt ('unknown': its worker died after handing it over) also settles
it, with the event as evidence (``growth.reconcile.esp``): a delivery or the ESP's acceptance
'sent', a bounce or a refusal 'failed'; a delivery also settles 'sent' a send queued again while
in doubt (an operator's retry), which would otherwise go out twice. Deliveries about any other
send are ignored, as before.

Bounces that come back by mail (``growth.bounces``, ESP name ``mailbox``) take this same path.
Their soft bounces are also counted: the BOUNCE_SOFT_LIMIT-th send to an address that bounced
softly within BOUNCE_SOFT_WINDOW_DAYS suppresses it for the tenant (reason bounced). An ESP's
soft bounces are only recorded, as before: the ESP keeps its own count.
"""

from __future__ import annotations

import hashlib
import logging
from email.utils import parseaddr
from enum import StrEnum

from anymail.signals import AnymailTrackingEvent, EventType
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import InterfaceError, OperationalError, transaction

from growth.audience.addresses import parse_address
from growth.feedback.bounces import classify_event
from growth.job_ids import parse_job_id, parse_message_id
from growth.managers.feedback import Attribution, SendRecord
from growth.models import FeedbackEvent, Subscriber, Suppression
from growth.reconcile.esp import settle_in_doubt, settles_as
from growth.reputation import guard as reputation_guard

logger = logging.getLogger("growth.feedback")  # one name for the webhooks and the events

MAX_TEXT = 1000  # characters kept of an ESP's description or MTA response
_BIGINT_MAX = 2**63 - 1
_UNSUBSCRIBING = {Suppression.Reason.UNSUBSCRIBED, Suppression.Reason.COMPLAINED}
SOFT_BOUNCES_COUNTED = {"mailbox"}  # the feedback whose soft bounces add up to a suppression


class Handled(StrEnum):
    IGNORED = "ignored"  # not feedback we keep (delivered, opened…)
    SETTLED = "settled"  # a delivery that settled a send in doubt (nothing else kept)
    UNATTRIBUTED = "unattributed"  # recorded without a tenant: it names no send of ours
    BAD_ADDRESS = "bad_address"  # no usable recipient
    DUPLICATE = "duplicate"  # already recorded
    RECORDED = "recorded"  # recorded, nothing suppressed
    SUPPRESSED = "suppressed"


def on_tracking(sender, event: AnymailTrackingEvent, esp_name: str, **kwargs) -> None:
    """Receive ``anymail.signals.tracking``; never let a bad event fail the webhook."""
    try:
        handle_event(esp_name=esp_name, event=event)
    except (OperationalError, InterfaceError):
        # The database is away: anymail answers 500 and the ESP posts again later, which is
        # harmless (each event acts once) and loses nothing.
        raise
    except Exception:
        # Anything else would fail again on every retry: log it, answer 200.
        logger.exception("feedback event failed; dropped", extra=_context(esp_name, event))


def handle_event(*, esp_name: str, event: AnymailTrackingEvent) -> Handled:
    """Record one event and suppress what it calls for; return what happened."""
    context = _context(esp_name, event)
    verdict = classify_event(esp_name, event)
    if verdict is None and settles_as(event) is None:
        logger.debug("feedback event ignored", extra=context)
        return Handled.IGNORED
    email_lower = _email_lower(event.recipient)
    attribution = attribute(event, email_lower, recipient_given=_given(event.recipient))
    send = attribution.send
    if verdict is None:
        # a delivery (or the ESP's acceptance): news only about a send in doubt
        if send is not None and _settle(esp_name, event, send, context):
            return Handled.SETTLED
        logger.debug("feedback event ignored", extra=context)
        return Handled.IGNORED
    email_lower = email_lower or (send and send.email_lower)
    if email_lower is None:
        logger.warning("feedback event without a usable recipient; dropped", extra=context)
        return Handled.BAD_ADDRESS
    suppress = verdict.suppress if send is not None else None
    with transaction.atomic():
        if (suppress is None and send is not None and esp_name in SOFT_BOUNCES_COUNTED
                and verdict.event_type == EventType.BOUNCED):
            suppress = _soft_bounce_limit(esp_name, send, email_lower)
        if not FeedbackEvent.objects.record(
                esp=esp_name, event_id=event_key(esp_name, event, email_lower),
                event_type=verdict.event_type, reject_reason=verdict.reject_reason,
                email_lower=email_lower, attribution=attribution,
                suppressed=suppress is not None, description=_text(event.description),
                mta_response=_text(event.mta_response), occurred_at=event.timestamp):
            logger.info("feedback event already recorded", extra=context)
            return Handled.DUPLICATE
        if send is None:
            logger.warning("feedback event not attributed (%s); recorded, nothing suppressed",
                           attribution.unattributed_because, extra=context)
            return Handled.UNATTRIBUTED
        _settle(esp_name, event, send, context)
        if suppress is None:
            logger.info("feedback event recorded", extra=context)
            return Handled.RECORDED
        Suppression.objects.suppress(account_id=send.account_id, email_lower=email_lower,
                                     reason=suppress, campaign_id=send.campaign_id)
        if suppress in _UNSUBSCRIBING:
            Subscriber.objects.unsubscribe_address(account_id=send.account_id,
                                                   email_lower=email_lower)
        # a hard bounce or a complaint: the reputation guard judges the tenant once this commits
        reputation_guard.feedback_recorded(account_id=send.account_id, event_type=verdict.event_type)
    logger.info("feedback event suppressed the address",
                extra={**context, "account_id": send.account_id, "reason": suppress})
    return Handled.SUPPRESSED


def _soft_bounce_limit(esp_name: str, send: SendRecord, email_lower: str) -> str | None:
    """Suppress (bounced) at this soft bounce if, with it, BOUNCE_SOFT_LIMIT different sends to
    the address bounced softly within the window; in the recording transaction, which the count
    locks for the (tenant, address) so that two bounces at once both count."""
    limit = settings.BOUNCE_SOFT_LIMIT
    if limit <= 0:
        return None
    earlier = FeedbackEvent.objects.soft_bounces(
        esp=esp_name, account_id=send.account_id, email_lower=email_lower, send_id=send.send_id,
        days=settings.BOUNCE_SOFT_WINDOW_DAYS)
    return Suppression.Reason.BOUNCED if earlier + 1 >= limit else None


def _settle(esp_name: str, event: AnymailTrackingEvent, send: SendRecord,
            context: dict[str, object]) -> bool:
    settled = settle_in_doubt(esp_name=esp_name, event=event, send=send)
    if settled:
        logger.info("feedback event settled a send in doubt",
                    extra={**context, "send_id": send.send_id, "verdict": settled})
    return settled is not None


def attribute(event: AnymailTrackingEvent, email_lower: str | None, *,
              recipient_given: bool = False) -> Attribution:
    """Find the send the event is about in our own ledger; its tenant is the send's account.

    The payload names the send by the provider's message id, our Message-ID or the job id in
    the metadata we attached; whatever else the payload says (metadata's account and campaign,
    the recipient) may only agree with that send. An event that names none, names two, or
    contradicts the one it names is not attributed, and so suppresses nothing anywhere; nor one
    whose recipient is given but is no address (it cannot be shown to agree).
    """
    metadata = event.metadata if isinstance(event.metadata, dict) else {}
    found: dict[int, SendRecord] = {}
    message_id = str(event.message_id or "").strip()
    if message_id:
        ours = parse_message_id(message_id)
        send = (FeedbackEvent.objects.send_by_job(ours) if ours
                else FeedbackEvent.objects.send_by_provider_id(message_id=message_id[:255]))
        if send is not None:
            found[send.send_id] = send
    job_id = metadata.get("job_id")
    job = parse_job_id(job_id) if isinstance(job_id, str) else None
    if job is not None and (send := FeedbackEvent.objects.send_by_job(job)) is not None:
        found[send.send_id] = send
    if not found:
        return Attribution(None, "it names no send of ours")
    if len(found) > 1:
        return Attribution(None, "its message id and its metadata name different sends")
    (send,) = found.values()
    for key, ours in (("account_id", send.account_id), ("campaign_id", send.campaign_id)):
        if key in metadata and _id(metadata[key]) != ours:
            return Attribution(None, f"its metadata's {key} is not the send's")
    if email_lower is None and recipient_given:
        return Attribution(None, "its recipient is not an address")
    if email_lower is not None and email_lower != send.email_lower:
        return Attribution(None, "its recipient is not the send's address")
    return Attribution(send)


def event_key(esp_name: str, event: AnymailTrackingEvent, email_lower: str) -> str:
    """Return the ESP's event id, or one derived from the event when the ESP gives none
    (Postmark's SubscriptionChange, Resend without its svix-id header): the same event posted
    again derives the same id, so a retry still finds its row."""
    if event.event_id:
        return _text(event.event_id)[:255]  # PostgreSQL refuses a NUL: the event was dropped
    timestamp = event.timestamp.isoformat() if event.timestamp else ""
    parts = [esp_name, event.event_type, str(event.message_id or ""), email_lower, timestamp]
    return "derived:" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _email_lower(recipient: object) -> str | None:
    """The recipient's dedup key: an address, or one with a display name ("Ann <a@x.example>")."""
    if not isinstance(recipient, str):
        return None
    for candidate in (recipient, parseaddr(recipient)[1]):
        try:
            return parse_address(candidate).email_lower
        except ValidationError:
            continue
    return None


def _given(recipient: object) -> bool:
    return isinstance(recipient, str) and bool(recipient.strip())


def _id(value: object) -> int | None:
    """A positive database id from metadata (ESPs hand metadata back as strings), else None."""
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if 0 < number <= _BIGINT_MAX else None


def _text(value: object) -> str:
    return str(value or "").replace("\x00", "")[:MAX_TEXT]


def _context(esp_name: str, event: AnymailTrackingEvent) -> dict[str, object]:
    return {"esp": esp_name, "event_type": getattr(event, "event_type", None),
            "event_id": getattr(event, "event_id", None),
            "message_id": getattr(event, "message_id", None)}
