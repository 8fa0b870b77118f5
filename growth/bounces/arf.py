"""Feedback reports (ARF, RFC 5965) from mailbox providers' feedback loops: a recipient marked
our message as spam.

A multipart/report (report-type=feedback-report) with a human-readable part, a
message/feedback-report part of fields (Feedback-Type, User-Agent, Version, Original-Mail-From,
Original-Rcpt-To, Arrival-Date, Reporting-MTA, Source-IP…) and the reported message or its
headers. Only the types that are a recipient's complaint count (``abuse``, and ``fraud``, a
report of phishing); ``not-spam``, ``virus``, ``other`` and RFC 6591's ``auth-failure`` (DMARC
failure reports) are no complaint.

A feedback loop sends its reports to the address registered with it, not to the message's
envelope sender: the report's Original-Mail-From field, or the Return-Path the receiving system
wrote into the reported message, then carries our signed bounce address (``record``). Some
loops redact the recipient (no Original-Rcpt-To): the signed address alone names the send then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email.message import Message

from growth.bounces import mime

COMPLAINTS = {"abuse", "fraud"}


@dataclass(frozen=True, slots=True)
class FeedbackReport:
    feedback_type: str  # lower case
    user_agent: str
    original_mail_from: str | None
    original_rcpt_to: tuple[str, ...]
    arrival_date: datetime | None
    reporting_mta: str
    source_ip: str
    original_return_path: str | None  # of the reported message, as the receiver wrote it
    original_message_id: str

    @property
    def complaint(self) -> bool:
        return self.feedback_type in COMPLAINTS


def parse(message: Message) -> FeedbackReport | None:
    part = mime.find_part(message, "message/feedback-report")
    if part is None:
        return None
    blocks = mime.header_blocks(part)
    if not blocks:
        return None
    report = blocks[0]
    feedback_type = mime.field(report, "Feedback-Type").split(" ")[0].lower()
    if not feedback_type:
        return None
    original = mime.enclosed(message)
    recipients = tuple(address for value in mime.fields(report, "Original-Rcpt-To")
                       if (address := mime.typed_address(value) or value.strip("<> ")))
    return FeedbackReport(
        feedback_type=feedback_type,
        user_agent=mime.field(report, "User-Agent"),
        original_mail_from=mime.field(report, "Original-Mail-From").strip("<> ") or None,
        original_rcpt_to=recipients,
        arrival_date=mime.date(mime.field(report, "Arrival-Date")
                               or mime.field(report, "Received-Date")),
        reporting_mta=mime.field(report, "Reporting-MTA"),
        source_ip=mime.field(report, "Source-IP"),
        original_return_path=(mime.field(original, "Return-Path").strip("<> ") or None
                              if original is not None else None),
        original_message_id=mime.field(original, "Message-ID") if original is not None else "")
