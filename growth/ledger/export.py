"""A campaign's ledger as CSV (for spreadsheets: formulas neutralised) or JSON Lines (raw values),
one chunk of text per page of rows, so that memory stays that of one page."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime

from growth.audience.address_files import spreadsheet_safe
from growth.job_ids import message_id
from growth.managers.ledger import LedgerRow

COLUMNS = ["email", "status", "sent_at", "attempts", "last_error", "job_id", "message_id",
           "provider_message_id", "resent_in_id", "feedback", "feedback_detail", "feedback_at"]

Value = str | int | None
# Line ends to str.splitlines beyond the controls below U+0020, which json escapes anyway. Only a
# string in the JSON can hold them, so replacing them with their escape keeps the value.
_ESCAPED_LINE_ENDS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


# What the platform writes into a row's error that names its own machines and people (a lost
# worker's host and pid: sends.sql, recover_expired; an operator's login: verdicts.sql): a
# tenant's download says what happened without them.
_PLATFORM_NAMES = [(re.compile(r"lease expired while held by .*\Z", re.DOTALL),
                    "lease expired: the worker sending it was lost"),
                   (re.compile(r"marked (sent|failed) by .+? after: "),
                    r"marked \1 by an operator after: ")]


def for_the_tenant(error: str) -> str:
    """A row's stored error as its tenant may read it (``_PLATFORM_NAMES``)."""
    for pattern, replacement in _PLATFORM_NAMES:
        error = pattern.sub(replacement, error)
    return error


def record(row: LedgerRow, *, tenant: bool = False) -> dict[str, Value]:
    """The row's exported fields, by column: text as stored (``tenant``: the error as its tenant
    may read it), times in ISO 8601 (UTC)."""
    return {
        "email": row.email,
        "status": row.status,
        "sent_at": _iso(row.sent_at),
        "attempts": row.attempts,
        "last_error": for_the_tenant(row.last_error) if tenant else row.last_error,
        "job_id": row.job_id,
        "message_id": message_id(row.job_id),
        "provider_message_id": row.provider_message_id,
        "resent_in_id": row.resent_in_id,
        "feedback": row.feedback,
        "feedback_detail": row.feedback_detail,
        "feedback_at": _iso(row.feedback_at),
    }


def csv_cell(value: Value) -> str | int:
    """A spreadsheet must show the value, never run it: text that could start a formula
    (an address like ``=HYPERLINK(...)@x.example`` is valid, an error may start with ``-``) gets
    a leading quote (OWASP's CSV injection advice)."""
    if value is None:
        return ""
    return spreadsheet_safe(value) if isinstance(value, str) else value


def csv_chunks(pages: Iterable[list[LedgerRow]], *, tenant: bool = False) -> Iterator[str]:
    """The header, then one chunk of CSV lines per page (``tenant``: see ``record``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    yield _drain(buffer)
    for page in pages:
        writer.writerows([csv_cell(value) for value in record(row, tenant=tenant).values()]
                         for row in page)
        yield _drain(buffer)


def jsonl_chunks(pages: Iterable[list[LedgerRow]]) -> Iterator[str]:
    """One JSON object a line (no header), one chunk per page; non-ASCII kept as is, but for the
    characters some readers take for line ends (str.splitlines does), which stay escaped."""
    for page in pages:
        text = "".join(json.dumps(record(row), ensure_ascii=False) + "\n" for row in page)
        yield text.translate(_ESCAPED_LINE_ENDS)


FORMATS: dict[str, Callable[[Iterable[list[LedgerRow]]], Iterator[str]]] = {
    "csv": csv_chunks,
    "jsonl": jsonl_chunks,
}


def filename(campaign_id: int, fmt: str = "csv") -> str:
    return f"campaign-{campaign_id}-sends.{fmt}"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text
