"""Postfix's mail log as evidence (see postfix.org's LOGGING_README and DEBUG_README).

    ... relay postfix/cleanup[2102]: 4bNQK05rZVz1xkF: message-id=<campaign.7.42@growth.example>
    ... relay postfix/smtp[2104]: 4bNQK05rZVz1xkF: to=<a@example.org>, relay=..., status=sent (250 ...)

cleanup(8) logs the Message-ID header of every message as it comes in, under the queue id the
message keeps until it leaves the queue, and refuses some there (``reject:``/``milter-reject:``,
from header_checks or a milter), which the client is told. The relay has accepted the message
only once qmgr(8) logs it (``from=<…>, size=…, nrcpt=…``): cleanup logs the Message-ID before the
end of DATA, and a client that died during DATA (the very crash that leaves a row in doubt)
leaves that line and nothing more. The delivery agents' lines (smtp, lmtp, local, virtual,
pipe…: ``to=<…>, relay=…, status=sent|deferred|bounced (…)``) are kept as evidence of what
followed. A message re-injected by a content filter has a second queue id with the same
Message-ID: both are kept. A queue id is used again once its message is ``removed``: from then
on, its lines are another message's.

Any syslog_name ("postfix", "postfix-out", "postfix/submission") and both timestamps
(evidence.SYSLOG_TIMESTAMP); lines of other programs (no "/" in their name) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from growth.reconcile.evidence import SYSLOG_TIMESTAMP, Collector, Sighting

_LINE = re.compile(rf"{SYSLOG_TIMESTAMP}\s+\S+\s+[^\s\[\]:]*/[\w.-]+\[\d+\]:\s(?P<text>.*)")
# short queue ids are hexadecimal; long ones (enable_long_queue_ids) use [0-9B-Zb-z] less vowels
_QUEUED = re.compile(r"(?P<queue_id>[0-9A-Za-z]{6,20}): (?P<what>.*)")
_MESSAGE_ID = re.compile(r"message-id=\s*(?P<value>.*)")
_ANGLE_ADDR = re.compile(r"<[^<>]*>")
_DELIVERY = re.compile(r"to=<[^>]*>,.* status=[a-z]+\b")
_REFUSAL = re.compile(r"(?:milter-)?reject: ")
_QUEUED_BY_QMGR = re.compile(r"from=<[^>]*>, size=\d+, nrcpt=\d+")
_REMOVED = "removed"


def parse(lines: Iterable[str], collector: Collector) -> None:
    tracked: dict[str, Sighting] = {}  # queue id -> the send in doubt it carries
    for line in lines:
        if not line.strip():
            continue
        header = _LINE.match(line)
        collector.read(recognized=header is not None)
        queued = header and _QUEUED.fullmatch(header["text"])
        if not queued:
            continue
        queue_id, what = queued["queue_id"], queued["what"]
        if (message_id := _MESSAGE_ID.fullmatch(what)) is not None:
            tracked.pop(queue_id, None)  # the id's earlier message, if any, has left
            value = _value(message_id["value"])
            if value and (sighting := collector.message(value, line, handle=queue_id)):
                tracked[queue_id] = sighting
        elif (sighting := tracked.get(queue_id)) is not None:
            if _REFUSAL.match(what):
                collector.refuse(sighting, queue_id, line)
            elif _QUEUED_BY_QMGR.match(what):
                collector.queue(sighting, queue_id, line)
            elif _DELIVERY.match(what):
                collector.add(sighting, line)
            elif what == _REMOVED:
                del tracked[queue_id]


def _value(header: str) -> str:
    """The msg-id that opens a Message-ID header as cleanup logs it (a comment may follow it,
    and may quote anything)."""
    header = header.strip()
    bracketed = _ANGLE_ADDR.match(header)
    if bracketed:
        return bracketed[0]
    words = header.split()
    return words[0] if words and not words[0].startswith("<") else ""
