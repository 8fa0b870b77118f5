from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import EmailMessage

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One rendered message bound to the send row it settles."""

    send_id: int
    job_id: str
    message: EmailMessage


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the transport said of one message."""

    SENT = "sent"
    TRANSIENT = "transient"  # worth retrying later, with the same key
    PERMANENT = "permanent"  # will never work: the row fails
    THROTTLED = "throttled"  # "slow down": not delivered; again later, no attempt counted
    # the whole message went out and no answer came (the connection dropped, or timed out,
    # after the SMTP content's final dot or once an API request was sent): it may have arrived.
    # For a receiver that de-duplicates it is retried with the same key, as a transient failure;
    # for a plain one the row becomes 'unknown' for an operator (RFC 1047's duplicate problem)
    IN_DOUBT = "in_doubt"
    # IN_DOUBT to a receiver that de-duplicates (the worker's reading): due again under the same
    # key, and in doubt until sent (a follow-up, under its own key, must not take it)
    IN_DOUBT_RETRIED = "in_doubt_retried"
    # the receiver holds another message under our key (an ESP's "idempotency key reused with
    # a different body"): an earlier try whose answer was lost took it, or another sender uses
    # our key. In doubt for good: 'unknown' for an operator, never sent again under that key
    KEY_TAKEN = "key_taken"
    # the relay or ESP refused us, not the recipient (our login, our API key, our host, its
    # certificate, our sender): not delivered, and no message of the campaign would be. The
    # row is due again at once, no attempt counted, and the worker pauses the campaign with
    # the refusal for an operator to mend the transport and resume it
    REFUSED = "refused"
    # the worker never put it on the wire (the claim's lease ran out before its turn): due again
    # at once, no attempt counted, and not in doubt for this attempt. The worker's, never a
    # transport's
    UNSENT = "unsent"

    # whom a throttle concerns: the recipient's mailbox provider, or our whole account with
    # the relay or ESP (an API's 429, SES's "Maximum sending rate exceeded")
    DESTINATION = "destination"
    TRANSPORT = "transport"

    send_id: int
    kind: str
    provider_message_id: str = ""
    error: str = ""
    throttle_scope: str = ""  # for THROTTLED: DESTINATION or TRANSPORT
    retry_after: float | None = None  # seconds the receiver asked us to wait, if it said


class BaseTransport:
    """Base class for transports.

    What a transport knows of its receiver, for ``receiver_deduplicates`` to decide:
    ``idempotent`` forces the answer (None: the setting decides, then the receiver's own
    declaration), ``receiver_declares_idempotent`` is that declaration (e.g. an email backend's
    ``idempotent_receiver``), ``idempotency_window`` how long the receiver remembers a key.
    """

    idempotent: bool | None = None
    receiver_declares_idempotent: bool = False
    idempotency_window: float | None = None  # seconds; None: for ever, or not known
    # it waits on a network (a relay's, an ESP's answers): a worker's connections overlap those
    # waits. One that does not (the null transport; Django's console, file and in-memory
    # backends) gets one connection: more would only take turns on the GIL.
    waits_on_a_wire: bool = True

    @property
    def label(self) -> str:
        """A short name for metrics and logs (bounded: one per kind of transport)."""
        return type(self).__name__

    def open(self) -> None:
        """Open whatever connection the transport keeps between batches."""

    def close(self) -> None:
        """Close it; safe to call twice."""

    def copy(self) -> BaseTransport:
        """Another transport like this one, with a connection of its own (``growth.sending.wires``
        sends on several at once). A transport that keeps state between messages overrides it."""
        return copy.copy(self)

    def send_bulk(self, deliveries: Sequence[Delivery]) -> list[Outcome]:
        """Send each delivery; return one Outcome per delivery. Must not raise for one bad message."""
        raise NotImplementedError("subclasses of BaseTransport must provide a send_bulk() method")

    def __enter__(self) -> BaseTransport:
        self.open()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def receiver_deduplicates(transport: BaseTransport, *, lease: float) -> bool:
    """Return True when a resend under the same key is harmless: the receiver absorbs it.

    This is the one place that decides it. The worker then retries a row whose lease expired
    after its hand-over with the same key; otherwise such a row becomes 'unknown' for an
    operator (exactly-once is at-least-once plus an idempotent receiver). In order: what the
    transport forces, SENDER_IDEMPOTENT_TRANSPORT, what the receiver declares; and never when the
    receiver forgets keys before a lease runs out, since the retry comes about one lease after
    the first attempt.
    """
    declared = transport.idempotent
    if declared is None:
        declared = settings.SENDER_IDEMPOTENT_TRANSPORT
    if declared is None:
        declared = transport.receiver_declares_idempotent
    window = transport.idempotency_window
    if declared and window is not None and lease >= window:
        logger.error("lease %.0fs outlives the receiver's %.0fs idempotency window: treating the "
                     "receiver as plain", lease, window)
        return False
    return bool(declared)


def receiver_forgets_keys_after(transport: BaseTransport, *, deduplicates: bool) -> float | None:
    """Return the seconds after a row's first hand-over during which a resend under its key is
    still absorbed: 0 for a receiver that does not de-duplicate (``deduplicates``, as
    ``receiver_deduplicates`` said), its ``idempotency_window`` for one that does (None: it
    remembers for ever, or says nothing of it). A claim makes a row in doubt for longer
    'unknown' instead of sending it: a retry after a long backoff or a pause of days comes
    after the receiver forgot the first attempt."""
    return transport.idempotency_window if deduplicates else 0.0
