"""What a relay's records say about one campaign's Message-IDs, sorted as they are read.

A parser (``postfix``, ``exim``, ``message_ids``) knows a format; it tells a ``Collector`` which
Message-ID each message had, under which id of the relay's own (a Postfix queue id, an Exim
message id), which later lines are about that message, and whether the relay refused it. The
collector keeps only the campaign's rows in doubt, with the lines that show what happened to
them, and counts the rest: its memory grows with the rows in doubt, not with the log.
"""

from __future__ import annotations

import gzip
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from growth.job_ids import parse_message_id

MAX_LINES = 8  # lines of evidence kept per send
MAX_LINE = 500  # characters kept of each

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

    handles: dict[str, bool] = field(default_factory=dict)  # the relay's id -> it refused that one
    lines: list[str] = field(default_factory=list)
    omitted: int = 0  # lines beyond MAX_LINES

    @property
    def accepted(self) -> bool:
        """The relay took the message: a list says so, or a log shows one of its copies queued
        and not refused."""
        return not self.handles or not all(self.handles.values())

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
        self.not_in_doubt: set[int] = set()  # this campaign's subscribers whose row is not unknown
        self.other_campaigns: set[str] = set()  # job ids
        self.not_ours: set[str] = set()
        self.lines = 0  # lines read (not blank)
        self.recognized = 0  # of those, lines in the source's format
        self.used = 0  # of those, lines kept as evidence

    def read(self, *, recognized: bool) -> None:
        self.lines += 1
        self.recognized += recognized

    def message(self, message_id: str, line: str, *, handle: str = "") -> Sighting | None:
        """The relay had a message with this Message-ID (under ``handle``, its own id for it):
        return its sighting if it is one of the campaign's rows in doubt, else count it."""
        key = parse_message_id(message_id)
        if key is None:
            self.not_ours.add(message_id.strip().strip("<>"))
        elif key.campaign_id != self.campaign_id:
            self.other_campaigns.add(key.job_id)
        elif key.subscriber_id not in self._in_doubt:
            self.not_in_doubt.add(key.subscriber_id)
        else:
            sighting = self.sightings.setdefault(key.subscriber_id, Sighting())
            if handle:
                sighting.handles.setdefault(handle, False)
            self.add(sighting, line)
            return sighting
        return None

    def add(self, sighting: Sighting, line: str) -> None:
        """A further line about a message in doubt."""
        self.used += 1
        if len(sighting.lines) < MAX_LINES:
            text = line.strip()
            sighting.lines.append(text if len(text) <= MAX_LINE else text[:MAX_LINE - 1] + "…")
        else:
            sighting.omitted += 1

    def refuse(self, sighting: Sighting, handle: str, line: str) -> None:
        """The relay refused the copy it had under ``handle`` (after it had logged its
        Message-ID): that copy was not sent."""
        sighting.handles[handle] = True
        self.add(sighting, line)

    @property
    def accepted(self) -> dict[int, Sighting]:
        return {sid: s for sid, s in self.sightings.items() if s.accepted}

    @property
    def refused(self) -> dict[int, Sighting]:
        return {sid: s for sid, s in self.sightings.items() if not s.accepted}


def lines_of(path: Path) -> Iterator[str]:
    """The file's lines, as text; a log rotated and compressed with gzip (maillog.2.gz) is
    read as it is. EvidenceError if it cannot be read or is not text (its message does not
    name the file: the caller's does)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as file:
            for number, raw in enumerate(file, 1):
                if b"\0" in raw:
                    raise EvidenceError(f"not a text file (a NUL byte on line {number})")
                yield raw.decode("utf-8", errors="replace").rstrip("\r\n")
    except (OSError, EOFError) as exc:  # gzip's bad or truncated file: OSError, EOFError
        raise EvidenceError(f"cannot read it: {getattr(exc, 'strerror', None) or exc}") from exc
