from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from django.conf import settings
from django.core.mail import get_connection
from django.core.mail.backends import smtp
from django.core.mail.message import sanitize_address
from django.utils.module_loading import import_string

from growth.sending.mime import OutgoingEmail
from growth.sending.transports import pipelining
from growth.sending.transports.base import BaseTransport, Delivery, Outcome
from growth.sending.transports.errors import DEFECTS, TransportBroke, classify_failure, untried

logger = logging.getLogger(__name__)

# anymail statuses that mean the provider will not deliver the message
_ANYMAIL_REFUSED = {"rejected", "invalid", "failed"}
# Django's backends that write where they run, on no network
LOCAL_BACKENDS = {f"django.core.mail.backends.{name}"
                  for name in ("console", "filebased", "locmem", "dummy")}


class DjangoMailTransport(BaseTransport):
    """Send through Django's configured email backend (EMAIL_URL): SMTP, console, file, or any
    django-anymail ESP. One backend connection is kept open across batches; each message is sent
    on its own so that each gets its own outcome.

    The receiver is what the backend declares (``idempotent_receiver`` and
    ``idempotency_window``, see growth.sending.backends); ``receiver_deduplicates`` decides.

    Over Django's own SMTP backend, a rendered message (OutgoingEmail) goes to smtplib as bytes,
    with what only this path can do: its VERP envelope sender (``envelope_from``), its DKIM
    signature, made on exactly the bytes that go on the wire, and its envelope in one write where
    the relay advertises PIPELINING (``pipelining``). Any other backend (an ESP, which
    signs with its own keys; console, file) gets the message as it is, unsigned.
    """

    def __init__(self, *, backend: str | None = None, idempotent: bool | None = None,
                 **backend_options) -> None:
        self._backend_path = backend
        self._backend_options = backend_options
        self._connection = None
        self._senders: dict[str, str] = {}  # From as given -> as the SMTP envelope wants it
        backend_class = import_string(backend or settings.EMAIL_BACKEND)
        self.backend_class = backend_class  # what the worker's console says of it at start
        self.idempotent = idempotent
        self.receiver_declares_idempotent = getattr(backend_class, "idempotent_receiver", False)
        self.idempotency_window = getattr(backend_class, "idempotency_window", None)
        self.waits_on_a_wire = getattr(backend_class, "waits_on_a_wire",
                                       backend_class.__module__ not in LOCAL_BACKENDS)
        # an ESP's API builds the message from its fields (Amazon SES: from Django's MIME
        # message, which it rewrites): the prebuilt bytes are not for it
        self._builds_its_own = _is_anymail(backend_class)
        self._label = f"django_mail:{backend_class.__module__}.{backend_class.__name__}"

    @property
    def label(self) -> str:
        return self._label

    def copy(self) -> DjangoMailTransport:
        """The same backend and options, on a connection of its own."""
        return type(self)(backend=self._backend_path, idempotent=self.idempotent,
                          **self._backend_options)

    def open(self) -> None:
        if self._connection is None:
            connection = get_connection(self._backend_path, fail_silently=False,
                                        **self._backend_options)
            connection.open()
            self._connection = connection

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # a dead connection may fail to say goodbye
                logger.debug("closing the mail connection failed", exc_info=True)

    def send_bulk(self, deliveries: Sequence[Delivery]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for position, delivery in enumerate(deliveries):
            try:
                self.open()
            except DEFECTS as exc:
                self.close()
                raise TransportBroke(exc, outcomes + [untried(d.send_id, exc)
                                                      for d in deliveries[position:]]) from exc
            except Exception as exc:
                # Nobody to talk to: the rest of the batch waits for the next attempt.
                failure = classify_failure(exc)
                if failure.kind not in (Outcome.THROTTLED, Outcome.REFUSED):
                    # what fails at connect is not the rows' fault
                    failure = replace(failure, kind=Outcome.TRANSIENT)
                outcomes += [failure.outcome(d.send_id) for d in deliveries[position:]]
                break
            try:
                outcome = self._send_one(delivery)
            except DEFECTS as exc:  # this message may have gone out: it has no outcome
                self.close()
                raise TransportBroke(exc, outcomes + [untried(d.send_id, exc)
                                                      for d in deliveries[position + 1:]]) from exc
            outcomes.append(outcome)
            if outcome.kind == Outcome.REFUSED:  # the rest would be refused as this one was
                outcomes += [replace(outcome, send_id=d.send_id) for d in deliveries[position + 1:]]
                break
        return outcomes

    def _plain_smtp(self) -> bool:
        """Django's own SMTP backend, not a subclass that changes what it sends."""
        send = getattr(type(self._connection), "send_messages", None)
        return send is smtp.EmailBackend.send_messages and self._connection.connection is not None

    def _sendmail(self, message: OutgoingEmail) -> int:
        """Hand the message's bytes to the open SMTP connection: what Django's backend would do
        (without parsing both addresses again and rebuilding a prebuilt message for every
        recipient), from the envelope sender the message names and DKIM-signed when it has a
        signer."""
        if message.prebuilt is not None:
            data, recipients = message.prebuilt, message.to
        else:  # one that only Django's builder makes: built as Django's backend builds it
            encoding = message.encoding or settings.DEFAULT_CHARSET
            recipients = [sanitize_address(address, encoding) for address in message.recipients()]
            if not recipients:
                return 0
            data = message.message().as_bytes(linesep="\r\n")
        if message.dkim_signer is not None:
            data = _signed(message.dkim_signer, data)
        sender = message.envelope_from
        if sender is None:
            sender = self._senders.get(message.from_email)
            if sender is None:
                sender = self._senders[message.from_email] = sanitize_address(message.from_email,
                                                                              "utf-8")
        pipelining.sendmail(self._connection.connection, sender, recipients, data)
        return 1

    def _send_one(self, delivery: Delivery) -> Outcome:
        message = delivery.message
        if self._builds_its_own and isinstance(message, OutgoingEmail):
            message.prebuilt = None
        try:
            if self._plain_smtp() and isinstance(message, OutgoingEmail):
                accepted = self._sendmail(message)
            else:
                accepted = self._connection.send_messages([message])
        except DEFECTS:
            raise  # not an answer of the receiver: send_bulk stops the chunk
        except Exception as exc:
            failure = classify_failure(exc)
            if failure.reconnect:
                self.close()
            return failure.outcome(delivery.send_id)
        status = getattr(message, "anymail_status", None)
        if status is not None and status.status and status.status <= _ANYMAIL_REFUSED:
            return Outcome(delivery.send_id, Outcome.PERMANENT,
                           error=f"provider refused: {', '.join(sorted(status.status))}")
        if (status is not None and status.status and not status.message_id
                and status.status <= _ANYMAIL_REFUSED | {"unknown"}):
            # no id, and no word that it was taken: Postmark's 422 (ErrorCode 300, "email not
            # sent") naming an address anymail could not match to ours
            return Outcome(delivery.send_id, Outcome.PERMANENT,
                           error="provider did not take the message: "
                                 + getattr(status.esp_response, "text", "")[:500])
        if not accepted:
            return Outcome(delivery.send_id, Outcome.TRANSIENT, error="the backend sent nothing")
        provider_id = (status.message_id if status is not None and status.message_id
                       else message.extra_headers["Message-ID"])
        return Outcome(delivery.send_id, Outcome.SENT, provider_message_id=str(provider_id))


def _is_anymail(backend_class: type) -> bool:
    try:
        from anymail.backends.base import AnymailBaseBackend
    except ImportError:  # pragma: no cover - django-anymail is optional at import time
        return False
    return issubclass(backend_class, AnymailBaseBackend)


def _signed(signer, data: bytes) -> bytes:
    """``data`` with its DKIM signature. The key was checked when the campaign's renderer
    loaded it; a message dkimpy cannot sign fails for good (a ValueError: permanent), never
    goes out unsigned."""
    try:
        return signer.sign(data)
    except Exception as exc:
        raise ValueError(f"DKIM signing failed: {type(exc).__name__}: {exc}") from exc
