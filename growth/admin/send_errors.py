"""A send's ``last_error`` read as an SMTP reply: code and text ("550 5.1.1 No such user").

Two stored forms: the reply itself ("550 5.1.1 No such user"), and the older
"<exception>: <repr>" of smtplib's exceptions, whose reply is a bytes repr inside a tuple:
``SMTPRecipientsRefused: {'x@example.com': (550, b'5.1.1 No such user')}``,
``SMTPDataError: (554, b'5.7.1 Rejected')``. Anything else (a lost lease, a provider's refusal,
an operator's note) is shown as it is.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# What the engine and operators' verdicts put in front of an earlier error (sends.sql, verdicts.sql).
_NOTE = re.compile(r"^(requeued by an operator|marked (?:sent|failed) by .+?) after: ", re.DOTALL)
_REPLY = re.compile(r"^([245]\d\d)[ -](?:([245]\.\d{1,3}\.\d{1,3}) )?(.*)$", re.DOTALL)
_REPR = re.compile(r"\(([245]\d\d), b(['\"])((?:\\.|(?!\2).)*)(?:\2|$)", re.DOTALL)
_ENHANCED = re.compile(r"^([245]\.\d{1,3}\.\d{1,3})\s+(.*)$", re.DOTALL)
_CONTINUED = re.compile(r"^[245]\d\d[ -]")  # a later line of a multi-line reply


@dataclass(frozen=True, slots=True)
class SendError:
    code: str  # the SMTP reply code ("550"), "" when the error is not a reply
    enhanced: str  # its enhanced status code ("5.1.1"), or ""
    text: str
    notes: tuple[str, ...] = ()  # what happened to the row since ("requeued by an operator")

    @property
    def full_code(self) -> str:
        return " ".join(part for part in (self.code, self.enhanced) if part)

    def __str__(self) -> str:
        return " ".join(part for part in (self.full_code, self.text) if part)


def read_error(stored: str) -> SendError:
    """Return ``stored`` (growth_sends.last_error) as code + text, in either stored form."""
    rest, notes = stored.strip(), []
    while note := _NOTE.match(rest):
        notes.append(note[1])
        rest = rest[note.end():]
    reply = _REPLY.match(rest)
    if reply:
        return SendError(reply[1], reply[2] or "", _one_line(reply[3], reply[2]), tuple(notes))
    old = _REPR.search(rest)
    if old:
        enhanced, text = _split_enhanced(_bytes_text(old[2], old[3]))
        return SendError(old[1], enhanced, text, tuple(notes))
    return SendError("", "", _one_line(rest), tuple(notes))


def _bytes_text(quote: str, body: str) -> str:
    """The text of a bytes repr's body; a body cut short by the stored length is read as is."""
    try:
        raw = ast.literal_eval(f"b{quote}{body}{quote}")
    except (SyntaxError, ValueError):
        return body
    return raw.decode("utf-8", "replace")


def _split_enhanced(text: str) -> tuple[str, str]:
    found = _ENHANCED.match(text.strip())
    return (found[1], _one_line(found[2], found[1])) if found else ("", _one_line(text))


def _one_line(text: str, enhanced: str | None = "") -> str:
    """A multi-line reply as one line: its later lines repeat the codes, keep them once."""
    first, *more = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    rest = []
    for line in more:
        line = _CONTINUED.sub("", line)
        if enhanced and line.startswith(enhanced):
            line = line[len(enhanced):].strip()
        rest.append(line)
    return " ".join([first, *rest])
