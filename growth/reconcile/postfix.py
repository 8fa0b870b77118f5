"""Postfix's mail log as evidence (see postfix.org's LOGGING_README and DEBUG_README).

    ... relay postfix/cleanup[2102]: 4bNQK05rZVz1xkF: message-id=<campaign.7.42@growth.example>
    ... relay postfix/smtp[2104]: 4bNQK05rZVz1xkF: to=<a@example.org>, relay=..., status=sent (250 ...)

cleanup(8) logs the Message-ID header of every message it queues, under the queue id the
message keeps until it leaves the queue: once a message has a queue id, the relay has accepted
it, unless cleanup then logs its refusal under that id (``reject:``/``milter-reject:``, from
header_checks or a milter), which the client was told. The delivery agents' lines (smtp, lmtp,
local, virtual, pipe…: ``to=<…>, relay=…, status=sent|deferred|bounced (…)``) are kept as
evidence of what followed. A message re-injected by a content filter has a second queue id with
the same Message-ID: both are kept.

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
        if (sighting := tracked.get(queue_id)) is not None:
            if _REFUSAL.match(what):
                collector.refuse(sighting, queue_id, line)
            elif _DELIVERY.match(what):
                collector.add(sighting, line)
        elif (message_id := _MESSAGE_ID.fullmatch(what)) is not None:
            value = _value(message_id["value"])
            if value and (sighting := collector.message(value, line, handle=queue_id)):
                tracked[queue_id] = sighting


def _value(header: str) -> str:
    """The msg-id of a Message-ID header as cleanup logs it (a comment may follow it)."""
    bracketed = _ANGLE_ADDR.search(header)
    if bracketed:
        return bracketed[0]
    words = header.split()
    return words[0] if words else ""
