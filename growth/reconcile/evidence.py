"""What a relay's records say about one campaign's Message-IDs, sorted as they are read.

A parser (``postfix``, ``exim``, ``message_ids``) knows a format; it tells a ``Collector`` which
Message-ID each message had, under which id of the relay's own (a Postfix queue id, an Exim
message id), which later lines are about that message, and whether the relay refused it. The
collector keeps only the campaign's rows in doubt, with the lines that show what happened to
them, and counts the rest: its memory grows with the rows in doubt, not with the log (a few
of the rest are kept as a sample, and a line is read at most MAX_READ octets at a time).

A relay's id of a message goes from SEEN (its Message-ID logged as the message comes in) to
QUEUED (the relay has the whole message: accepted) or REFUSED. A message whose client died
during DATA is only SEEN: not evidence of anything.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from growth.job_ids import parse_message_id

MAX_LINES = 8  # lines of evidence kept per send
MAX_LINE = 500  # characters kept of each
MAX_READ = 64 * 1024  # octets of a line read: past it, the rest of the line is skipped
SAMPLE = 1000  # Message-IDs kept of each kind that is only counted
SEEN, QUEUED, REFUSED = "seen", "queued", "refused"  # what became of a relay's copy

# The timestamp a syslog daemon writes before "host program[pid]: ": RFC 3339 (rsyslog's
# RSYSLOG_FileFormat, the default of Debian 12 and later; journalctl -o short-iso), or the BSD
# one, whose day is padded with a space by syslog and with a zero by Postfix's own postlogd.
SYSLOG_TIMESTAMP = (r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)"
                    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?)")


class EvidenceError(Exception):
    """The file cannot be taken as evidence (unreadable, not text, not in the format said);
    raised before anything is changed."""


@dataclass
class Sighting:
    """What a source shows about one send in doubt."""

    handles: dict[str, str] = field(default_factory=dict)  # the relay's id -> SEEN, QUEUED, REFUSED
    lines: list[str] = field(default_factory=list)
    omitted: int = 0  # lines beyond MAX_LINES

    @property
    def accepted(self) -> bool:
        """The relay took the message: a list says so, or a log shows one of its copies queued."""
        return not self.handles or QUEUED in self.handles.values()

    @property
    def refused(self) -> bool:
        """The relay refused every copy of it it logged."""
        return bool(self.handles) and all(state == REFUSED for state in self.handles.values())

    def evidence(self, source: str, handle_name: str) -> str:
        """The verdict's evidence: the source, the relay's ids, the lines."""
        head = source
        if self.handles:
            head += f", {handle_name} " + ", ".join(self.handles)
        more = [f"(and {self.omitted} more lines)"] if self.omitted else []
        return "\n".join([head + ":", *self.lines, *more])


class Collector:
    """Sorts the Message-IDs a source names for a reconcile of ``campaign_id``, whose rows in
    doubt are those of the subscribers ``in_doubt``."""

    def __init__(self, *, campaign_id: int, in_doubt: Collection[int]) -> None:
        self.campaign_id = campaign_id
        self._in_doubt = frozenset(in_doubt)
        self.sightings: dict[int, Sighting] = {}  # subscriber id -> what the source shows
        # the rest, counted (each sighting), with a sample of up to SAMPLE of each kind
        self.not_in_doubt: set[int] = set()  # this campaign's subscribers whose row is not unknown
        self.other_campaigns: set[str] = set()  # job ids
        self.not_ours: set[str] = set()
        self.counted = {"not in doubt": 0, "other campaigns": 0, "not ours": 0}
        self.lines = 0  # lines read (not blank)
        self.recognized = 0  # of those, lines in the source's format
        self.used = 0  # of those, lines kept as evidence

    def read(self, *, recognized: bool) -> None:
        self.lines += 1
        self.recognized += recognized

    def message(self, message_id: str, line: str, *, handle: str = "",
                queued: bool = False) -> Sighting | None:
        """The relay had a message with this Message-ID (under ``handle``, its own id for it;
        ``queued``: the whole message, accepted): return its sighting if it is one of the
        campaign's rows in doubt, else count it. A Message-ID of ours names this install's
        MESSAGE_ID_DOMAIN: another's, with the same shape, is not ours."""
        key = parse_message_id(message_id, domain=settings.MESSAGE_ID_DOMAIN)
        if key is None:
            self._count("not ours", self.not_ours, message_id.strip().strip("<>"))
        elif key.campaign_id != self.campaign_id:
            self._count("other campaigns", self.other_campaigns, key.job_id)
        elif key.subscriber_id not in self._in_doubt:
            self._count("not in doubt", self.not_in_doubt, key.subscriber_id)
        else:
            sighting = self.sightings.setdefault(key.subscriber_id, Sighting())
            if handle:  # an acceptance already seen under it stands
                sighting.handles.setdefault(handle, QUEUED if queued else SEEN)
            self.add(sighting, line)
            return sighting
        return None

    def _count(self, kind: str, sample: set, value: object) -> None:
        self.counted[kind] += 1
        if len(sample) < SAMPLE:
            sample.add(value)

    def add(self, sighting: Sighting, line: str) -> None:
        """A further line about a message in doubt."""
        self.used += 1
        if len(sighting.lines) < MAX_LINES:
            text = line.strip()
            sighting.lines.append(text if len(text) <= MAX_LINE else text[:MAX_LINE - 1] + "…")
        else:
            sighting.omitted += 1

    def queue(self, sighting: Sighting, handle: str, line: str) -> None:
        """The relay has the whole message it had under ``handle``: it accepted that copy."""
        if sighting.handles.get(handle) == SEEN:
            sighting.handles[handle] = QUEUED
        self.add(sighting, line)

    def refuse(self, sighting: Sighting, handle: str, line: str) -> None:
        """The relay refused the copy it had under ``handle`` (after it had logged its
        Message-ID): that copy was not sent."""
        sighting.handles[handle] = REFUSED
        self.add(sighting, line)

    @property
    def accepted(self) -> dict[int, Sighting]:
        return {sid: s for sid, s in self.sightings.items() if s.accepted}

    @property
    def refused(self) -> dict[int, Sighting]:
        return {sid: s for sid, s in self.sightings.items() if s.refused}


def lines_of(path: Path) -> Iterator[str]:
    """The file's lines, as text; a log rotated and compressed with gzip (maillog.2.gz) is
    read as it is. A line is read MAX_READ octets at most (the rest of it skipped), a UTF-8
    byte order mark dropped. EvidenceError if it cannot be read or is not text (its message
    does not name the file: the caller's does)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as file:
            number = 0
            while raw := file.readline(MAX_READ):
                number += 1
                if not raw.endswith(b"\n"):  # a line longer than MAX_READ: skip the rest
                    while (rest := file.readline(MAX_READ)) and not rest.endswith(b"\n"):
                        pass
                if b"\0" in raw:
                    raise EvidenceError(f"not a text file (a NUL byte on line {number})")
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                yield text.removeprefix("\ufeff") if number == 1 else text
    except (OSError, EOFError, zlib.error) as exc:  # gzip's bad or truncated file
        raise EvidenceError(f"cannot read it: {getattr(exc, 'strerror', None) or exc}") from exc
