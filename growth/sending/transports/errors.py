"""The error policy: which failures are worth a retry and which are final.

A 4xx SMTP reply, a dropped connection or a provider's 5xx/429 is transient: the row goes back to
the queue with a backoff and the same key. A 5xx reply for the recipient, a refused address or a
message that cannot even be built is permanent. Configuration problems (authentication, sender
refused) are transient: they are the operator's to fix and must not fail a whole campaign.

What is stored of a failure is what an operator would read in a mail server's log: an SMTP reply
as its code, enhanced status and text ("550 5.1.1 No such user"), anything else as
"ExceptionName: message"; bounded either way. The hard-bounce rule
(``growth.feedback.bounces.smtp_hard_bounce``) reads the reply's leading codes.
"""

from __future__ import annotations

import re
import smtplib
from dataclasses import dataclass

from django.core.mail import BadHeaderError

from growth.sending.transports.base import Outcome

try:  # django-anymail is optional at import time
    from anymail import exceptions as anymail_errors
except ImportError:  # pragma: no cover
    anymail_errors = None

MAX_ERROR = 500  # characters of a failure kept on the row
_ENHANCED = re.compile(r"[245]\.\d{1,3}\.\d{1,3}(?=\s|$)")


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # Outcome.TRANSIENT or Outcome.PERMANENT
    error: str
    reconnect: bool = False  # the connection is no longer usable


def classify_failure(exc: BaseException) -> Failure:
    """Return what a send failure means for the row."""
    error = describe(exc)
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        return Failure(_by_code(min(codes) if codes else 550), error)
    if isinstance(exc, smtplib.SMTPServerDisconnected | smtplib.SMTPConnectError):
        return Failure(Outcome.TRANSIENT, error, reconnect=True)
    if isinstance(exc, smtplib.SMTPAuthenticationError | smtplib.SMTPSenderRefused
                  | smtplib.SMTPHeloError | smtplib.SMTPNotSupportedError):
        return Failure(Outcome.TRANSIENT, error, reconnect=True)
    if isinstance(exc, smtplib.SMTPResponseException):
        # 421: the server is closing the connection (smtplib has already closed its side)
        return Failure(_by_code(exc.smtp_code), error, reconnect=exc.smtp_code == 421)
    # before OSError: anymail's API errors are requests' HTTPErrors, hence OSErrors too
    if anymail_errors is not None and isinstance(exc, anymail_errors.AnymailError):
        return _anymail(exc, error)
    if isinstance(exc, BadHeaderError | UnicodeError | ValueError):
        return Failure(Outcome.PERMANENT, error)
    if isinstance(exc, OSError):  # refused, reset, timed out
        return Failure(Outcome.TRANSIENT, error, reconnect=True)
    return Failure(Outcome.TRANSIENT, error, reconnect=True)


def describe(exc: BaseException) -> str:
    """The failure as an operator reads it: an SMTP reply as "550 5.1.1 No such user", anything
    else as "ExceptionName: message"."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused) and exc.recipients:
        replies = {address: smtp_reply(code, reply)
                   for address, (code, reply) in exc.recipients.items()}
        if len(replies) == 1:
            (text,) = replies.values()
        else:
            text = "; ".join(f"{address}: {reply}" for address, reply in replies.items())
    elif isinstance(exc, smtplib.SMTPResponseException):  # data, sender, auth, helo, connect
        text = smtp_reply(exc.smtp_code, exc.smtp_error)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _bounded(text)


def smtp_reply(code: int, text: bytes | str) -> str:
    """One line for an SMTP reply: its code, then its text decoded (the enhanced status, when the
    server gave one, leads it); a multiline reply's lines joined, its repeated status dropped."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    status = _ENHANCED.match(lines[0]) if lines else None
    if status:
        lines[1:] = [line.removeprefix(status[0]).strip() for line in lines[1:]]
    return " ".join([str(code), *filter(None, lines)])


def _bounded(text: str) -> str:
    text = " ".join(text.replace("\x00", "").split())  # one line, as a log shows it
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR - 1] + "…"


def _by_code(code: int) -> str:
    return Outcome.PERMANENT if 500 <= code < 600 else Outcome.TRANSIENT


def _anymail(exc, error: str) -> Failure:
    if isinstance(exc, anymail_errors.AnymailRecipientsRefused | anymail_errors.AnymailInvalidAddress
                  | anymail_errors.AnymailUnsupportedFeature):
        return Failure(Outcome.PERMANENT, error)
    status = getattr(exc, "status_code", None)
    if status is not None and 400 <= status < 500 and status not in (408, 409, 425, 429):
        return Failure(Outcome.PERMANENT, error)
    return Failure(Outcome.TRANSIENT, error)
