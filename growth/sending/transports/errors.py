"""The error policy: which failures are worth a retry and which are final.

A 4xx SMTP reply, a dropped connection or a provider's 5xx/429 is transient: the row goes back to
the queue with a backoff and the same key. A 5xx reply for the recipient, a refused address or a
message that cannot even be built is permanent.

A refusal of us, not of the recipient, is neither: the relay refused our login (a 5xx to AUTH,
or no AUTH or STARTTLS offered), our host (a 5xx greeting or reply to EHLO) or our sender (a
5xx to MAIL FROM), its certificate failed verification, an ESP did not take our key or would
not let us (HTTP 401, 403), knows no such sending domain or endpoint (404) or no such sender
(``_ESP_REFUSES_US_TEXT``), or the backend lacks its settings (ImproperlyConfigured). No
message of the campaign would fare better, and none reached anyone: the row is queued again, no
attempt counted, and the worker pauses the campaign with the refusal for an operator
(``Outcome.REFUSED``). Failing the rows would lose the campaign to a typo in a password;
retrying them would knock on the relay's door with the wrong key for two days. A 4xx of the
same kind ("454 4.7.0 Temporary authentication failure") is transient.
A relay may say the same later, to each recipient or to the message: Postfix's
``smtpd_delay_reject`` (on by default) answers its client, HELO and sender checks at RCPT TO
("553 5.7.1 <news@…>: Sender address rejected: not owned by user", "Client host rejected",
"Relay access denied"), Amazon SES at the end of DATA ("554 Message rejected: Email address is
not verified"), Microsoft 365 too ("SendAsDeniedException", "5.7.57 Client not authenticated").
Those texts (``_REFUSES_US_TEXT``) are read as refusals of us wherever they come. A relay's
refusal of the message for its size (``_TOO_LARGE_TEXT``, at MAIL FROM or at the end of DATA) is
read the same way: the campaign's messages are all about as large, and the operator sends a
smaller one to the rest (a follow-up) rather than each row failing.

What is stored of a failure is what an operator would read in a mail server's log: an SMTP reply
as its code, enhanced status and text ("550 5.1.1 No such user"), anything else as
"ExceptionName: message"; bounded either way. The hard-bounce rule
(``growth.feedback.bounces.smtp_hard_bounce``) reads the reply's leading codes.

A failure after the whole message went out with no answer (the connection dropped or timed out
after the content's final dot, an API request that timed out reading its answer) is in doubt:
the receiver may have accepted it (``MessageInDoubt``, ``Outcome.IN_DOUBT``).

An exception no receiver ever answers with (a TypeError, an AttributeError, a KeyError: a defect
of the code that sends, ours, a backend's or a library's) is not a failure of the row either: a
retry cannot mend it, and it must not fail every recipient after two days of retries (as Amazon
SES's backend did when given bytes it could not rewrite). The transport stops the chunk there
(``TransportBroke``), the worker pauses the campaign with it (its containment); the message it
broke on may have gone out, so it is judged as a crash's would be.

A transient answer that says "slow down" is a throttle, not a failure of the row: Gmail's
"421 4.7.28 ... unusual rate", Yahoo's "421 4.7.0 [TSS04] Messages temporarily deferred",
Microsoft's "451 4.7.500 Server busy", "450 4.2.1 ... receiving mail at a rate ...", SES's
"454 Throttling failure: Maximum sending rate exceeded", an API's HTTP 429 (with Retry-After).
The row is queued again without an attempt counted and the rate of whom it concerns is lowered
(``growth.managers.limits``): the recipient's provider, or for an account-wide limit the transport.
"""

from __future__ import annotations

import re
import smtplib
import ssl
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.core.mail import BadHeaderError

from growth.sending.transports.base import Outcome

try:  # django-anymail (and requests, which it brings) are optional at import time
    import requests
    from anymail import exceptions as anymail_errors
except ImportError:  # pragma: no cover
    anymail_errors = requests = None
try:  # boto3's, for Amazon SES through anymail
    from botocore import exceptions as boto_errors
except ImportError:  # pragma: no cover
    boto_errors = None

MAX_ERROR = 500  # characters of a failure kept on the row
_ENHANCED = re.compile(r"[245]\.\d{1,3}\.\d{1,3}(?=\s|$)")


# enhanced status codes of rate and policy deferrals (RFC 3463: 4.7.x security or policy,
# 4.2.1 mailbox disabled or receiving too fast, 4.3.2 not accepting messages now, 4.5.3 too
# many recipients)
_THROTTLE_STATUS = re.compile(r"^4\.(7\.\d{1,3}|2\.1|3\.2|4\.5|5\.3)$")
_THROTTLE_TEXT = re.compile(r"\brate\b|throttl|too many (messages|connections|recipients)"
                            r"|slow down|temporarily deferred|busy", re.IGNORECASE)
_GREYLISTED = re.compile(r"grey ?list|gray ?list", re.IGNORECASE)  # a first-contact test
# a relay saying our account's quota for the day is spent (Amazon SES over SMTP: "454 Throttling
# failure: Daily message quota exceeded"), a 4xx though nothing goes before the next day: as its
# API's answer, a refusal of us
_DAILY_QUOTA_TEXT = re.compile(r"daily message quota", re.IGNORECASE)
# a relay or an ESP refusing the message for its size, not the recipient: at MAIL FROM (its SIZE=)
# or at the end of DATA ("552 5.3.4 Message size exceeds fixed maximum message size", Gmail's
# "552-5.3.4 Your message exceeded Google's message size limits", aiosmtpd's "552 Error: Too much
# mail data"), an API's 413 ("Payload Too Large"). Every message of the campaign is about as
# large: a refusal of the campaign as it is, not a failure of each row. A mailbox's own limit or a
# full one ("552 5.2.2 Mailbox size limit exceeded") stays the recipient's.
_TOO_LARGE_TEXT = re.compile(r"\b5\.3\.4\b|message size|size limit|too much mail data"
                             r"|(message|payload|request entity|content) (is )?too (large|big)",
                             re.IGNORECASE)
_MAILBOX_TEXT = re.compile(r"\b5\.2\.\d{1,3}\b|mailbox|quota", re.IGNORECASE)
# a relay's refusal of us (our host, our sender, our login) given at RCPT TO or at DATA
_REFUSES_US_TEXT = re.compile(
    r"sender address rejected|client host rejected|helo command rejected|relay access denied"
    r"|relaying denied|relay not permitted|authentication required|not authenticated"
    r"|address is not verified|identities failed the check|sendasdenied"
    r"|permission to send as|permissions to send as", re.IGNORECASE)
# An ESP's API refusing our sender or our account, as each says it (never said of a recipient
# there): Postmark's 422 ErrorCode 400 ("... is not a Sender Signature on your account") and 412
# ("account pending approval"), Resend's 422 invalid_from_address. An SMTP reply's "domain not
# found" is the recipient's (Postfix's reject_unknown_recipient_domain): API answers only.
_ESP_REFUSES_US_TEXT = re.compile(r"sender signature|pending approval|invalid_from_address"
                                  r"|invalid `from` field", re.IGNORECASE)
# An ESP's API saying our ACCOUNT cannot send now, whatever its 4xx (429 included): no credits,
# a daily or monthly quota spent, sending suspended or paused. No message of the campaign would
# fare better until a person tops up, upgrades, re-enables (or the quota's day is over): a refusal
# of us. Retried as a throttle, every row would fail at the retry horizon; failed, at once.
_ESP_ACCOUNT_CANNOT_SEND_TEXT = re.compile(
    r"not allowed to send|may not send|account is pending|(daily|monthly) email sending quota"
    rf"|maximum credits exceeded|out of credits|{_DAILY_QUOTA_TEXT.pattern}", re.IGNORECASE)
# the same as the ESP's own code in its JSON answer: Postmark's ErrorCode (HTTP 422: 10 bad
# token, 400/401 sender signature, 405 not allowed to send, 412 pending, 413 may not send),
# Resend's name (429), Brevo's code (402, or its account under validation)
_ESP_ACCOUNT_CODES = {("ErrorCode", 10), ("ErrorCode", 400), ("ErrorCode", 401),
                      ("ErrorCode", 405), ("ErrorCode", 412), ("ErrorCode", 413),
                      ("name", "daily_quota_exceeded"), ("name", "monthly_quota_exceeded"),
                      ("code", "not_enough_credits"), ("code", "account_under_validation")}
# our account's limit with the relay or ESP, not the recipient's provider's
_ACCOUNT_LIMIT_TEXT = re.compile(r"maximum sending rate|sending quota|throttling failure"
                                 r"|account.{0,20}(rate|limit)", re.IGNORECASE)


REFUSAL_PREFIX = "The transport refused us:"  # a campaign paused for an Outcome.REFUSED


def refusal_reason(error: str) -> str:
    """The pause reason of a campaign whose transport refused us (``error``: as stored)."""
    return f"{REFUSAL_PREFIX} {error}"


# what a defect of the code raises, never a receiver's answer (see the module's docstring)
DEFECTS = (TypeError, AttributeError, NameError, LookupError, AssertionError, NotImplementedError,
           ImportError, RecursionError)


class TransportBroke(Exception):
    """The transport raised one of DEFECTS on a message of the chunk: ``cause``. ``outcomes``:
    those of the messages before it, and of those after it, never tried (``untried``); the one
    it broke on has none, since it may have gone out."""

    def __init__(self, cause: BaseException, outcomes: list[Outcome]) -> None:
        super().__init__(describe(cause))
        self.cause = cause
        self.outcomes = outcomes


def too_large(pause_reason: str) -> bool:
    """A campaign paused because its messages are larger than the relay or ESP takes."""
    return pause_reason.startswith(REFUSAL_PREFIX) and _too_large(pause_reason)


def _too_large(error: str) -> bool:
    return bool(_TOO_LARGE_TEXT.search(error)) and not _MAILBOX_TEXT.search(error)


def untried(send_id: int, cause: BaseException) -> Outcome:
    """The outcome of a message a broken transport never tried: due again at once, no attempt
    counted (as after a refusal of us; the worker pauses the campaign for the defect)."""
    return Outcome(send_id, Outcome.REFUSED,
                   error=f"not tried: the transport broke on an earlier message ({describe(cause)})")


class MessageInDoubt(Exception):
    """The whole message was sent and no answer came: it may have been accepted. Raised by the
    transport where it knows the message went out whole (``pipelining.sendmail``)."""


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # Outcome.TRANSIENT, PERMANENT, THROTTLED, IN_DOUBT, KEY_TAKEN or REFUSED
    error: str
    reconnect: bool = False  # the connection is no longer usable
    throttle_scope: str = ""  # for THROTTLED: Outcome.DESTINATION or Outcome.TRANSPORT
    retry_after: float | None = None

    def outcome(self, send_id: int) -> Outcome:
        return Outcome(send_id, self.kind, error=self.error, throttle_scope=self.throttle_scope,
                       retry_after=self.retry_after)


def classify_failure(exc: BaseException) -> Failure:
    """Return what a send failure means for the row."""
    error = describe(exc)
    if isinstance(exc, MessageInDoubt):
        return Failure(Outcome.IN_DOUBT, error, reconnect=True)
    if isinstance(exc, smtplib.SMTPResponseException | smtplib.SMTPRecipientsRefused) and (
            _DAILY_QUOTA_TEXT.search(error)):
        return Failure(Outcome.REFUSED, error, reconnect=True)
    if isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code >= 500 and _too_large(error):
        return Failure(Outcome.REFUSED, error)
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        replies = list(exc.recipients.values())
        codes = [code for code, _ in replies]
        # smtplib hangs up on a 421, whatever it says: the next message needs a new connection
        if replies and all(_refuses_us(text) for _, text in replies):
            return Failure(Outcome.REFUSED if min(codes) >= 500 else Outcome.TRANSIENT, error,
                           reconnect=421 in codes)
        if replies and all(_throttling(code, text) for code, text in replies):
            return _throttled(error, reconnect=421 in codes)
        return Failure(_by_code(min(codes) if codes else 550), error, reconnect=421 in codes)
    if isinstance(exc, smtplib.SMTPConnectError | smtplib.SMTPSenderRefused) and _throttling(
            exc.smtp_code, exc.smtp_error):
        # refused at connect or at MAIL FROM: the server we talk to limits our whole account
        return _throttled(error, reconnect=True, scope=Outcome.TRANSPORT)
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return Failure(Outcome.TRANSIENT, error, reconnect=True)
    if isinstance(exc, smtplib.SMTPConnectError | smtplib.SMTPAuthenticationError
                  | smtplib.SMTPSenderRefused | smtplib.SMTPHeloError):
        kind = Outcome.REFUSED if 500 <= exc.smtp_code < 600 else Outcome.TRANSIENT
        return Failure(kind, error, reconnect=True)
    if isinstance(exc, smtplib.SMTPNotSupportedError | ssl.SSLCertVerificationError
                  | ImproperlyConfigured):
        return Failure(Outcome.REFUSED, error, reconnect=True)
    if isinstance(exc, smtplib.SMTPResponseException) and _refuses_us(exc.smtp_error):
        kind = Outcome.REFUSED if exc.smtp_code >= 500 else Outcome.TRANSIENT
        return Failure(kind, error, reconnect=exc.smtp_code == 421)
    if isinstance(exc, smtplib.SMTPResponseException):
        # 421: the server is closing the connection (smtplib has already closed its side)
        if _throttling(exc.smtp_code, exc.smtp_error):
            return _throttled(error, reconnect=exc.smtp_code == 421)
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


def _refuses_us(text: bytes | str) -> bool:
    """Whether an SMTP reply's text refuses our host, sender or login (``_REFUSES_US_TEXT``)."""
    return bool(_REFUSES_US_TEXT.search(_reply_text(text)))


def _reply_text(text: bytes | str) -> str:
    """An SMTP reply's text as smtplib gives it (bytes, usually), decoded."""
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def _throttling(code: int, text: bytes | str) -> bool:
    """Whether an SMTP reply asks us to slow down (a 4xx whose enhanced status or text says so)."""
    if not 400 <= code < 500:
        return False
    text = _reply_text(text).strip()
    if _GREYLISTED.search(text):
        return False
    status = _ENHANCED.match(text)
    return bool(status and _THROTTLE_STATUS.match(status[0])) or bool(_THROTTLE_TEXT.search(text))


def _throttled(error: str, *, reconnect: bool = False, retry_after: float | None = None,
               scope: str | None = None) -> Failure:
    if scope is None:
        scope = Outcome.TRANSPORT if _ACCOUNT_LIMIT_TEXT.search(error) else Outcome.DESTINATION
    return Failure(Outcome.THROTTLED, error, reconnect=reconnect, throttle_scope=scope,
                   retry_after=retry_after)


def _ses_answer(exc) -> tuple[int | None, str]:
    """Amazon SES's answer to an anymail request (boto3's error: its HTTP status and error code;
    anymail's own status_code is None for it)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None, ""
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return (status if isinstance(status, int) else None), str(response.get("Error", {})
                                                               .get("Code", ""))


def _sent_without_answer(exc) -> bool:
    """The request went out whole and its answer never came (requests' ReadTimeout; boto3's
    read timeout or connection closed before the answer, as anymail's SES backend's cause)."""
    causes = (exc, exc.__cause__)
    return any((requests is not None and isinstance(cause, requests.exceptions.ReadTimeout))
               or (boto_errors is not None and isinstance(
                   cause, boto_errors.ReadTimeoutError | boto_errors.ConnectionClosedError))
               for cause in causes)


def _retry_after(exc) -> float | None:
    """An HTTP answer's Retry-After, in seconds (the delay form; a date is read as absent)."""
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    try:
        return min(max(float(value), 0.0), 3600.0) if value is not None else None
    except (TypeError, ValueError):
        return None


# Amazon SES's error codes that refuse our account or sender, whatever their HTTP status
_SES_REFUSALS = {"AccountSuspendedException", "SendingPausedException",
                 "AccountSendingPausedException", "MailFromDomainNotVerifiedException"}
_SES_THROTTLES = {"Throttling", "ThrottlingException", "TooManyRequestsException",
                  "LimitExceededException"}


def _esp_account_code(exc) -> bool:
    """Whether the ESP's JSON answer carries one of ``_ESP_ACCOUNT_CODES``."""
    response = getattr(exc, "response", None)
    try:
        body = response.json()
    except (AttributeError, ValueError):  # no answer, boto3's dict, not JSON
        return False
    return isinstance(body, dict) and any(body.get(key) == value
                                          for key, value in _ESP_ACCOUNT_CODES)


def _anymail(exc, error: str) -> Failure:
    status = getattr(exc, "status_code", None)
    ses_status, ses_code = _ses_answer(exc)
    status = status if status is not None else ses_status
    if _sent_without_answer(exc):
        return Failure(Outcome.IN_DOUBT, error)
    if status is not None and 400 <= status < 500 and (
            _ESP_ACCOUNT_CANNOT_SEND_TEXT.search(error) or _esp_account_code(exc)):
        return Failure(Outcome.REFUSED, error)
    if status == 413 or (status is not None and 400 <= status < 500 and _too_large(error)):
        return Failure(Outcome.REFUSED, error)
    if ses_code in _SES_THROTTLES:
        return _throttled(error, scope=Outcome.TRANSPORT)
    # 404: the sending endpoint or domain our settings name does not exist (Mailgun's "Domain
    # not found"); an API's send request is never "not found" for a recipient
    if status in (401, 402, 403, 404) or ses_code in _SES_REFUSALS or (
            status is not None and 400 <= status < 500
            and (_refuses_us(error) or _ESP_REFUSES_US_TEXT.search(error))):
        return Failure(Outcome.REFUSED, error)
    if isinstance(exc, anymail_errors.AnymailRecipientsRefused | anymail_errors.AnymailInvalidAddress
                  | anymail_errors.AnymailUnsupportedFeature):
        return Failure(Outcome.PERMANENT, error)
    # the answer came as a success we cannot read
    if isinstance(exc, anymail_errors.AnymailAPIError) and status is not None and 200 <= status < 300:
        return Failure(Outcome.IN_DOUBT, error)
    # Resend: "this idempotency key has been used on a request with another body". An earlier
    # try of this row, whose answer was lost, took the key: its message may be the one delivered.
    # Every resend under the key gets the same answer, and one under another key could be a
    # second message. (Resend's other 409, a request under the key still in progress, is retried.)
    if status == 409 and "invalid_idempotent_request" in error:
        return Failure(Outcome.KEY_TAKEN, error)
    if status == 429:  # the ESP's limit on our account
        return _throttled(error, retry_after=_retry_after(exc), scope=Outcome.TRANSPORT)
    if status is not None and 400 <= status < 500 and status not in (408, 409, 425, 429):
        return Failure(Outcome.PERMANENT, error)
    return Failure(Outcome.TRANSIENT, error)
