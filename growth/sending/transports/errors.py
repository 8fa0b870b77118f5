"""The error policy: which failures are worth a retry and which are final.

A 4xx SMTP reply, a dropped connection or a provider's 5xx/429 is transient: the row goes back to
the queue with a backoff and the same key. A 5xx reply for the recipient, a refused address or a
message that cannot even be built is permanent. Configuration problems (authentication, sender
refused) are transient: they are the operator's to fix and must not fail a whole campaign.
"""

from __future__ import annotations

import smtplib
from dataclasses import dataclass

from django.core.mail import BadHeaderError

from growth.sending.transports.base import Outcome

try:  # django-anymail is optional at import time
    from anymail import exceptions as anymail_errors
except ImportError:  # pragma: no cover
    anymail_errors = None


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # Outcome.TRANSIENT or Outcome.PERMANENT
    error: str
    reconnect: bool = False  # the connection is no longer usable


def classify_failure(exc: BaseException) -> Failure:
    """Return what a send failure means for the row."""
    error = f"{type(exc).__name__}: {exc}"[:1000]
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
