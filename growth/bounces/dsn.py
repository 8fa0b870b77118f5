"""Delivery status notifications (RFC 3464), read with the standard library's email package.

A DSN is a multipart/report whose message/delivery-status part (message/global-delivery-status
for SMTPUTF8 mail, RFC 6533) holds one block of per-message fields and one block per recipient:
Final-Recipient and Original-Recipient (the address as our relay gave it in RCPT TO), Action
(failed, delayed, delivered, relayed, expanded), Status (an RFC 3463 enhanced code) and usually
Diagnostic-Code (the remote server's reply). Postfix, Exim, Gmail, Exchange Online and most
others send these; Exim always says Status 5.0.0 and leaves the specific code to its
Diagnostic-Code, which ``growth.feedback.bounces.dsn_status`` reads.

Some mail systems send a plain-text notice instead (Yahoo's MAILER-DAEMON, qmail, old Exim):
``parse_text`` reads the one thing such a notice reliably gives, the remote server's reply, and
only from a mailer daemon. Whether a failure is hard is decided later, from the status alone
(``growth.feedback.bounces``): a notice without an enhanced code is never a hard bounce.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from email.message import Message

from growth.bounces import mime

STATUS_PARTS = ("message/delivery-status", "message/global-delivery-status")
MAILER_DAEMONS = {"mailer-daemon", "mailerdaemon", "mail-daemon", "postmaster"}

_STATUS = re.compile(r"(?<![\d.])[245]\.\d{1,3}\.\d{1,3}(?![\d.])")
# A remote server's reply in a notice's text: "550 5.1.1 …", "550-5.1.1 …", or a bare "554 …"
_REPLY = re.compile(r"(?<![\d.])([45])\d\d(?:[ -]([245]\.\d{1,3}\.\d{1,3}))?(?=[\s:,;.]|$)")
# Where a plain-text notice ends and the returned message begins. The text is anyone's: each
# pattern here runs in time linear in a line's length (possessive dashes, one "@" to split an
# address at). Backtracking over a long line of dashes took 5.6 s for 16 kB, and four times the
# line sixteen times as long, holding the GIL: one message stopped the whole intake.
_ORIGINAL_FOLLOWS = re.compile(
    r"^\s*+(?:-{2,}+.*(?:copy of|original message|below this line|returned message|message follows)"
    r"|-{2,}+\s*$|original message follows|the original message)", re.IGNORECASE)
_ANGLE_ADDRESS = re.compile(r"^\s*+<([^<>\s@]++@[^<>\s]++)>:?\s*$")
_ADDRESS_IN_FROM = re.compile(r"[^\s<>\"@]{1,64}@[^\s<>\"]{1,255}")
_WARNING = re.compile(r"warning only|will (?:continue to |keep )?(?:re)?try|still (?:being )?"
                      r"(?:re)?tr(?:y|ied)|not yet been delivered|has been delayed|delayed",
                      re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RecipientStatus:
    """One recipient's block of a DSN (or what a plain-text notice says of it)."""

    final_recipient: str | None
    original_recipient: str | None
    action: str  # failed, delayed, delivered, relayed, expanded (lower case)
    status: str  # "5.1.1", or "" when the report gives none
    diagnostic_code: str  # "smtp; 550 5.1.1 <…>: Recipient address rejected", unfolded
    remote_mta: str = ""
    last_attempt: datetime | None = None

    @property
    def recipient(self) -> str | None:
        """The address to compare with the send's: the original recipient (what our relay
        gave in RCPT TO) when reported, else the final one."""
        return self.original_recipient or self.final_recipient


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    reporting_mta: str
    arrival_date: datetime | None
    recipients: tuple[RecipientStatus, ...]
    structured: bool  # True: an RFC 3464 DSN; False: read from a plain-text notice


def parse(message: Message) -> DeliveryReport | None:
    """The message's RFC 3464 delivery report, or None if it has none (or one without a
    recipient block)."""
    part = mime.find_part(message, *STATUS_PARTS)
    if part is None:
        return None
    blocks = mime.header_blocks(part)
    if not blocks:
        return None
    per_message = blocks[0] if _is_per_message(blocks[0]) else None
    recipients = tuple(
        status for status in (_recipient(block) for block in blocks if block is not per_message)
        if status is not None)
    if not recipients:
        return None
    return DeliveryReport(
        reporting_mta=mime.field(per_message, "Reporting-MTA") if per_message else "",
        arrival_date=mime.date(mime.field(per_message, "Arrival-Date")) if per_message else None,
        recipients=recipients, structured=True)


def parse_text(message: Message) -> DeliveryReport | None:
    """A plain-text bounce notice from a mailer daemon, or None.

    It must come from a mailer daemon (From MAILER-DAEMON or postmaster: the null envelope
    sender is no sign, auto-replies use it too) and quote a remote server's reply: the notice's
    own words are not trusted to say more than that reply does. The failed address is the
    first ``<address>:`` line (Yahoo, qmail) or X-Failed-Recipients (Exim, Gmail); a notice
    that only warns of a delay is ``delayed``.
    """
    if not _from_a_mailer_daemon(message):
        return None
    notice = _notice(message)
    if not notice:
        return None
    reply, address = None, None
    lines = notice.splitlines()
    for number, line in enumerate(lines):
        if address is None and (angle := _ANGLE_ADDRESS.match(line)):
            address = angle[1]
        if reply is None and (found := _REPLY.search(line)):
            # the reply runs on over the following indented or non-empty lines
            following = [more.strip() for more in lines[number + 1:number + 4]]
            text = " ".join([line[found.start():].strip(), *_until_blank(following)])
            reply = (found, text)
    if reply is None:
        return None
    found, text = reply
    if address is None:
        failed = mime.field(message, "X-Failed-Recipients").split(",")[0].strip()
        address = failed if "@" in failed else None
    # the enhanced code only where the reply's class agrees: "450 5.1.1" is a transient refusal,
    # whatever its detail says (as dsn_status reads a Diagnostic-Code)
    status = found[2] if found[2] and found[2][0] == found[1] else ""
    delayed = found[1] == "4" and bool(_WARNING.search(notice))
    return DeliveryReport(
        reporting_mta="", arrival_date=None, structured=False,
        recipients=(RecipientStatus(final_recipient=address, original_recipient=None,
                                    action="delayed" if delayed else "failed", status=status,
                                    diagnostic_code=f"smtp; {text}"[:1000]),))


def _is_per_message(block: Message) -> bool:
    return "Final-Recipient" not in block and "Action" not in block


def _recipient(block: Message) -> RecipientStatus | None:
    final = mime.typed_address(mime.field(block, "Final-Recipient"))
    original = mime.typed_address(mime.field(block, "Original-Recipient"))
    action = mime.field(block, "Action").split(" ")[0].lower()
    if not action or (final is None and original is None and "Final-Recipient" not in block):
        return None
    status = _STATUS.search(mime.field(block, "Status"))
    return RecipientStatus(
        # a Final-Recipient that is there but unreadable stays unreadable: "" is no address
        final_recipient=final if final is not None else mime.field(block, "Final-Recipient"),
        original_recipient=original,
        action=action, status=status[0] if status else "",
        diagnostic_code=mime.field(block, "Diagnostic-Code"),
        remote_mta=mime.field(block, "Remote-MTA"),
        last_attempt=mime.date(mime.field(block, "Last-Attempt-Date")))


def _from_a_mailer_daemon(message: Message) -> bool:
    sender = mime.field(message, "From")
    address = _ADDRESS_IN_FROM.search(sender)
    local = (address[0] if address else sender).split("@")[0].lower()
    return local in MAILER_DAEMONS


def _notice(message: Message) -> str:
    """The human-readable notice: the first text/plain part, cut where the original begins."""
    part = mime.find_part(message, "text/plain")
    if part is None:
        return ""
    kept = []
    for line in mime.body_text(part).splitlines():
        if _ORIGINAL_FOLLOWS.match(line):
            break
        kept.append(line)
    return "\n".join(kept)


def _until_blank(lines: list[str]) -> list[str]:
    kept = []
    for line in lines:
        if not line:
            break
        kept.append(line)
    return kept
