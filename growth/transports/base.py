from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.core.mail import EmailMessage


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

    send_id: int
    kind: str
    provider_message_id: str = ""
    error: str = ""


class BaseTransport:
    """Base class for transports.

    ``idempotent`` says whether the receiver de-duplicates on the Idempotency-Key: if it does, a
    row whose worker died mid-send is retried with the same key; if not, it is held as 'unknown'.
    None means "as settings.SENDER_IDEMPOTENT_TRANSPORT says".
    """

    idempotent: bool | None = None

    def open(self) -> None:
        """Open whatever connection the transport keeps between batches."""

    def close(self) -> None:
        """Close it; safe to call twice."""

    def send_bulk(self, deliveries: Sequence[Delivery]) -> list[Outcome]:
        """Send each delivery; return one Outcome per delivery. Must not raise for one bad message."""
        raise NotImplementedError("subclasses of BaseTransport must provide a send_bulk() method")

    def __enter__(self) -> BaseTransport:
        self.open()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
