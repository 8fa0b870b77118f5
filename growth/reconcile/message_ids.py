"""A plain list of the Message-IDs a relay accepted, one a line, as evidence: what a relay's
operator can export when its log is not at hand (angle brackets optional; blank lines and lines
starting with # are skipped). Any other line is an error: the file is likely not such a list."""

from __future__ import annotations

import re
from collections.abc import Iterable

from growth.reconcile.evidence import Collector, EvidenceError

_MESSAGE_ID = re.compile(r"<?[^<>\s@]+@[^<>\s@]+>?")


def parse(lines: Iterable[str], collector: Collector) -> None:
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if not _MESSAGE_ID.fullmatch(text):
            raise EvidenceError(f"line {number} is not a Message-ID: {text[:80]!r}")
        collector.read(recognized=True)
        collector.message(text, line)
