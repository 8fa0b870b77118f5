"""One message received at the bounce domain -> the recording calls, and one log line.

What the message is decides first: a delivery status notification (``dsn``), a feedback report
(``arf``), a mailer daemon's plain-text notice (``dsn.parse_text``), an auto-reply (ignored) or
none of these (unparsed: kept for a person, never dropped). Then which send it is about, only
through the signed bounce address it came to (``growth.sending.verp.job_of``): the envelope
recipient when we have it (LMTP), else X-Original-To, Delivered-To, Envelope-To or To as the
bounce arrived; for a feedback report also the report's Original-Mail-From and the reported
message's Return-Path, both our bounce address as the original was sent. Nothing else the bounce
says about the original (its Message-ID, its headers) is trusted. An address of ours whose
signature does not hold is a forged token: nothing is written.

Each recipient the report names becomes an anymail tracking event for ``handle_event`` (ESP name
``mailbox``): the same attribution (the recipient must be the send's address, else the event is
recorded unattributed and suppresses nothing), the same suppressions, the same one row per
(report, recipient), so that a report delivered twice acts once, and the same settling of a send
in doubt. The row's event id is the send's job id and the report's own Message-ID.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.message import Message
from email.utils import getaddresses
from enum import StrEnum

from anymail.signals import AnymailTrackingEvent, EventType
from django.conf import settings
from django.core.exceptions import ValidationError

from growth.audience.addresses import parse_address
from growth.bounces import arf, autoreply, dsn, mime
from growth.feedback.events import Handled, handle_event
from growth.job_ids import JobKey
from growth.sending import verp

logger = logging.getLogger("growth.bounces")

ESP_NAME = "mailbox"
# Where the address a bounce came to is found, most trusted first (after the LMTP envelope)
ARRIVAL_HEADERS = ("X-Original-To", "Delivered-To", "Envelope-To", "X-Envelope-To", "To")

_SAYS_MOST = {"failed": 0, "delayed": 1}  # then the success reports
_ACTIONS = {
    "failed": EventType.BOUNCED,
    "delayed": EventType.DEFERRED,
    # success reports settle a send in doubt, and nothing else
    "delivered": EventType.DELIVERED,
    "relayed": EventType.DELIVERED,
    "expanded": EventType.DELIVERED,
}


class Outcome(StrEnum):
    ATTRIBUTED = "attributed"  # recorded for the send's tenant (or already was)
    UNATTRIBUTED = "unattributed"  # our signed address, but the report contradicts its send
    IGNORED = "ignored"  # a report that calls for nothing (a success, a "not spam" report)
    AUTO_REPLY = "auto-reply ignored"
    FORGED = "forged token"  # an address of ours whose signature does not hold
    NO_TOKEN = "no token"  # a report that came to no bounce address of ours
    UNPARSED = "unparsed"  # no report, no auto-reply: for a person to read


@dataclass(frozen=True, slots=True)
class Processed:
    outcome: Outcome
    detail: str
    kind: str = ""  # dsn, text notice, arf, auto-reply
    job_id: str | None = None
    handled: tuple[Handled, ...] = field(default=())

    def __str__(self) -> str:
        return f"{self.outcome}: {self.detail}"


def process(raw: bytes | Message, *, envelope_recipients: Sequence[str] = ()) -> Processed:
    """Record what one received message reports; return what happened (it is also logged).

    Each recording is its own transaction, committed when this returns. A database error is
    raised (the caller keeps the message and tries again: a report recorded already is then a
    duplicate); a message that cannot be read is UNPARSED, never an exception.
    """
    try:
        message = mime.read(raw)
        kind, report = _classify(message)
        bounce_id = _bounce_id(message)
    except Exception as exc:  # a hostile or broken message must not stop the loop
        logger.warning("bounce message unreadable", exc_info=True)
        return _log(Processed(Outcome.UNPARSED, f"unreadable ({type(exc).__name__}: {exc})"[:300]), "")
    if report is None:
        return _log(Processed(Outcome.UNPARSED, "neither a delivery report, a feedback report "
                                                "nor an auto-reply", kind), bounce_id)
    if kind == "auto-reply":
        return _log(Processed(Outcome.AUTO_REPLY, str(report), kind), bounce_id)
    extra = ()
    if isinstance(report, arf.FeedbackReport):
        extra = (report.original_mail_from or "", report.original_return_path or "")
    job, seen_ours = _job(message, envelope_recipients, extra)
    if job is None:
        if seen_ours:
            return _log(Processed(Outcome.FORGED, "its bounce address's signature does not hold; "
                                                  "nothing written", kind), bounce_id)
        return _log(Processed(Outcome.NO_TOKEN, "it came to no bounce address of ours; nothing "
                                                "written", kind), bounce_id)
    # the send in the key too: nobody can take a report's key before it comes, for another send
    event_id = f"{job.job_id}/{bounce_id}"
    if isinstance(report, arf.FeedbackReport):
        results = _record_complaint(message, report, job, event_id)
    else:
        results = _record_delivery_report(message, report, job, event_id)
    return _log(_summary(results, kind, job), bounce_id)


def _classify(message: Message) -> tuple[str, object]:
    if (report := dsn.parse(message)) is not None:
        return "dsn", report
    if (report := arf.parse(message)) is not None:
        return "arf", report
    # a mailer daemon's notice before the auto-reply check: old Exim's say Auto-Submitted too
    if (report := dsn.parse_text(message)) is not None:
        return "text notice", report
    if (reason := autoreply.auto_reply(message)) is not None:
        return "auto-reply", reason
    return "", None


def _job(message: Message, envelope_recipients: Sequence[str],
         extra: Sequence[str]) -> tuple[JobKey | None, bool]:
    """The job the first signed bounce address names, and whether any address looked like one
    of ours (local part ``bounces+…`` at the bounce domain) at all."""
    candidates = list(envelope_recipients)
    for name in ARRIVAL_HEADERS:
        values = [mime.text(value) for value in message.get_all(name) or []]
        candidates.extend(address for _, address in getaddresses(values) if address)
    candidates.extend(address for address in extra if address)
    looked_ours = False
    for address in candidates:
        job = verp.job_of(address)
        if job is not None:
            return job, True
        looked_ours = looked_ours or _looks_ours(address)
    return None, looked_ours


def _looks_ours(address: str) -> bool:
    local, _, domain = address.strip().strip("<>").rpartition("@")
    return (bool(settings.BOUNCE_DOMAIN) and domain.lower().rstrip(".") == settings.BOUNCE_DOMAIN
            and local.lower().startswith(settings.BOUNCE_LOCAL_PART.lower() + "+"))


def _record_delivery_report(message: Message, report: dsn.DeliveryReport, job: JobKey,
                            event_id: str) -> list[tuple[str, Handled | str]]:
    results: list[tuple[str, Handled | str]] = []
    for status in _one_block_each(report.recipients):
        event_type = _ACTIONS.get(status.action)
        label = f"{status.recipient or '(no address)'} {status.action} {status.status}".strip()
        if event_type is None:
            results.append((label, f"action {status.action!r} ignored"))
            continue
        if report.structured and not _readable(status.recipient):
            # a DSN must name its recipient (RFC 3464 §2.3.2): one we cannot read is no match
            logger.warning("bounce names an unreadable recipient %r; nothing written",
                           status.recipient, extra={"job_id": job.job_id})
            results.append((label, Handled.UNATTRIBUTED))
            continue
        reporter = report.reporting_mta or "a plain-text notice"
        event = AnymailTrackingEvent(
            event_type=event_type, event_id=event_id,
            timestamp=status.last_attempt or report.arrival_date or _date(message),
            recipient=status.recipient, metadata={"job_id": job.job_id},
            mta_response=status.diagnostic_code,
            description=f"{status.action} {status.status or '(no status)'}, reported by {reporter}",
            esp_event={"format": "rfc3464" if report.structured else "text",
                       "action": status.action, "status": status.status,
                       "diagnostic_code": status.diagnostic_code,
                       "final_recipient": status.final_recipient,
                       "original_recipient": status.original_recipient,
                       "remote_mta": status.remote_mta, "reporting_mta": report.reporting_mta})
        results.append((label, handle_event(esp_name=ESP_NAME, event=event)))
    return results


def _one_block_each(recipients: tuple[dsn.RecipientStatus, ...]) -> list[dsn.RecipientStatus]:
    """A report records one event per recipient (its key: the report and the address). One
    that lists an address twice, "delayed" and then "failed", recorded the first block and
    dropped the failure as a repeat: here the block that says most is kept, in the place of the
    address's first."""
    kept: dict[object, dsn.RecipientStatus] = {}
    for number, status in enumerate(recipients):
        key = (status.recipient or "").lower() or number
        first = kept.get(key)
        if first is None or _SAYS_MOST.get(status.action, 2) < _SAYS_MOST.get(first.action, 2):
            kept[key] = status
    return list(kept.values())


def _record_complaint(message: Message, report: arf.FeedbackReport, job: JobKey,
                      event_id: str) -> list[tuple[str, Handled | str]]:
    if not report.complaint:
        return [(f"feedback type {report.feedback_type}", "no complaint")]
    results: list[tuple[str, Handled | str]] = []
    # A loop that redacts the recipient: the signed address names the send and its address.
    for recipient in report.original_rcpt_to or (None,):
        event = AnymailTrackingEvent(
            event_type=EventType.COMPLAINED, event_id=event_id,
            timestamp=report.arrival_date or _date(message), recipient=recipient,
            metadata={"job_id": job.job_id},
            description=(f"{report.feedback_type} report from "
                         f"{report.user_agent or report.reporting_mta or 'a feedback loop'}"),
            esp_event={"format": "arf", "feedback_type": report.feedback_type,
                       "user_agent": report.user_agent, "source_ip": report.source_ip,
                       "reporting_mta": report.reporting_mta})
        label = f"{recipient or '(recipient redacted)'} {report.feedback_type}"
        results.append((label, handle_event(esp_name=ESP_NAME, event=event)))
    return results


_ATTRIBUTED = {Handled.SUPPRESSED, Handled.RECORDED, Handled.SETTLED, Handled.DUPLICATE}


def _summary(results: list[tuple[str, Handled | str]], kind: str, job: JobKey) -> Processed:
    handled = tuple(result for _, result in results if isinstance(result, Handled))
    if _ATTRIBUTED & set(handled):
        outcome = Outcome.ATTRIBUTED
    elif {Handled.UNATTRIBUTED, Handled.BAD_ADDRESS} & set(handled):
        outcome = Outcome.UNATTRIBUTED
    else:
        outcome = Outcome.IGNORED
    detail = "; ".join(f"{label}: {_said(result)}" for label, result in results)
    return Processed(outcome, detail, kind, job.job_id, handled)


_SAID = {
    Handled.SUPPRESSED: "suppressed for the send's tenant",
    Handled.RECORDED: "recorded",
    Handled.SETTLED: "settled the send in doubt",
    Handled.DUPLICATE: "already recorded",
    Handled.UNATTRIBUTED: "not the send's address: recorded unattributed, nothing suppressed",
    Handled.BAD_ADDRESS: "no usable address",
    Handled.IGNORED: "nothing to record",
}


def _said(result: Handled | str) -> str:
    return _SAID.get(result, str(result)) if isinstance(result, Handled) else result


def _readable(address: str | None) -> bool:
    if not address:
        return False
    try:
        parse_address(address)
    except ValidationError:
        return False
    return True


def _bounce_id(message: Message) -> str:
    """The report's own id, for its one row per recipient (with the send): its Message-ID, or
    (none, or too long) a hash of it or of its body, which a second delivery repeats."""
    message_id = mime.field(message, "Message-ID")
    if message_id and len(message_id) <= 200:
        return f"mid:{message_id}"
    if message_id:
        return "mid-sha256:" + hashlib.sha256(message_id.encode()).hexdigest()
    body = message.as_bytes().replace(b"\r\n", b"\n").partition(b"\n\n")[2]
    return "body-sha256:" + hashlib.sha256(body).hexdigest()


def _date(message: Message) -> datetime | None:
    return mime.date(mime.field(message, "Date"))


def _log(processed: Processed, bounce_id: str) -> Processed:
    level = logging.WARNING if processed.outcome in (Outcome.UNPARSED, Outcome.FORGED) else logging.INFO
    logger.log(level, "bounce %s", processed,
               extra={"outcome": str(processed.outcome), "kind": processed.kind,
                      "job_id": processed.job_id, "bounce_id": bounce_id})
    return processed
