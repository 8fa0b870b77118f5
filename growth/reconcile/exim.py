"""Exim's main log as evidence (the Exim specification, chapter "Log files").

    2024-03-05 10:15:01 1rhPqR-0004Ab-2c <= bounces@growth.example H=... id=campaign.7.42@growth.example
    2024-03-05 10:15:02 1rhPqR-0004Ab-2c => alice@example.org R=dnslookup T=remote_smtp ... C="250 ..."

An arrival line (``<=``) is written once Exim has accepted a message; with the default
log_selector it carries the Message-ID header, without its angle brackets, as ``id=``. Later
lines about the message name it by Exim's message id: deliveries (``=>``, ``->`` another address
of the same message, ``*>`` suppressed by -N), deferrals (``==``) and failures (``**``), kept as
evidence of what followed. Exim ids are 6-6-2 characters, and 6-11-4 from Exim 4.97 on.

The timestamp may have milliseconds (log_selector +millisec) and a zone (log_timezone), and a
process id may follow it (+pid); a main log written through syslog has the syslog prefix instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from growth.reconcile.evidence import SYSLOG_TIMESTAMP, Collector, Sighting

_EXIM_ID = r"[0-9A-Za-z]{6}-(?:[0-9A-Za-z]{11}-[0-9A-Za-z]{4}|[0-9A-Za-z]{6}-[0-9A-Za-z]{2})"
_LINE = re.compile(
    rf"(?:\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{{3}})?(?: [+-]\d{{4}})?"
    rf"|{SYSLOG_TIMESTAMP}\s+\S+\s+exim[\w.-]*\[\d+\]:)"
    rf"(?: \[\d+\])? (?P<text>.*)")
_MESSAGE = re.compile(rf"(?P<exim_id>{_EXIM_ID}) (?P<flag><=|=>|->|\*>|==|\*\*) .*")
_HEADER_ID = re.compile(r" id=(?P<value>\S+)")
# id= is the last field Exim writes before these; what follows them (a subject, addresses) and
# what comes before it (a quoted sender, an AUTH id) may say " id=" too: the last before is it
_AFTER_ID = re.compile(r' T="| from <| for ')


def parse(lines: Iterable[str], collector: Collector) -> None:
    tracked: dict[str, Sighting] = {}  # Exim id -> the send in doubt it carries
    for line in lines:
        if not line.strip():
            continue
        header = _LINE.match(line)
        collector.read(recognized=header is not None)
        message = header and _MESSAGE.fullmatch(header["text"])
        if not message:
            continue
        exim_id = message["exim_id"]
        if (sighting := tracked.get(exim_id)) is not None:
            collector.add(sighting, line)
        elif message["flag"] == "<=":
            before = _AFTER_ID.split(message[0], maxsplit=1)[0]
            found = [*_HEADER_ID.finditer(before)]
            if found and (sighting := collector.message(found[-1]["value"], line, handle=exim_id,
                                                        queued=True)):
                tracked[exim_id] = sighting
