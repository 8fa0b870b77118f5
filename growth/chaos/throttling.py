"""A real SMTP server on loopback (aiosmtpd) that throttles the way a mailbox provider does.

Mail for the domains of a throttled group (one provider: ``{"gmail.com", "googlemail.com"}``) is
accepted at most ``per_minute`` messages a minute, as a token bucket (refilled ``per_minute`` / 60
a second, up to a small burst), and refused beyond that at RCPT with Gmail's answer, "421 4.7.28
... unusual rate of unsolicited mail" (smtplib closes the connection on a 421, as the server
would). A group may throttle only for a while: ``for_seconds`` from its first message on. Mail
for any other domain is always accepted.

Every message accepted is recorded (when, to whom, its Message-ID and Idempotency-Key), so that
duplicates can be counted and the goodput a throttled provider got measured; so is every
throttling answer. The tests (``tests/test_throttling.py``) and the bench's ``pacing`` family
use it; ``growth.chaos.receiver`` is its sibling for crashes and failures.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser

from aiosmtpd.controller import Controller

from growth.chaos.receiver import free_port

# Gmail's answer to a sender over its rate, on one line (it sends it as a multiline reply)
UNUSUAL_RATE = ("421 4.7.28 Our system has detected an unusual rate of unsolicited mail "
                "originating from your IP address; it has been temporarily rate limited")


@dataclass(frozen=True, slots=True)
class Throttle:
    """One provider's limit: its domains, its rate, and for how long it applies."""

    domains: frozenset[str]
    per_minute: float  # messages accepted a minute, in the long run
    burst: float = 3.0  # messages accepted at once after a quiet spell
    for_seconds: float | None = None  # from the group's first message on; None: for ever
    reply: str = UNUSUAL_RATE

    def __post_init__(self) -> None:
        object.__setattr__(self, "domains", frozenset(d.lower() for d in self.domains))


@dataclass(frozen=True, slots=True)
class Arrival:
    """A message accepted, or a recipient refused with a throttling answer (no message yet)."""

    at: float  # time.time()
    rcpt: str
    message_id: str = ""
    key: str = ""  # the Idempotency-Key header

    @property
    def domain(self) -> str:
        return self.rcpt.rpartition("@")[2].lower()


@dataclass
class _Bucket:
    throttle: Throttle
    tokens: float
    refilled_at: float = 0.0  # time.monotonic()
    first_at: float | None = None  # the group's first recipient

    def take(self, now: float) -> bool:
        """One message's token, if there is one (always, once the throttling time is over)."""
        if self.first_at is None:
            self.first_at = self.refilled_at = now
        limit = self.throttle
        if limit.for_seconds is not None and now - self.first_at >= limit.for_seconds:
            return True
        self.tokens = min(limit.burst, self.tokens + (now - self.refilled_at) * limit.per_minute / 60)
        self.refilled_at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass
class _Handler:
    buckets: dict[str, _Bucket]  # domain -> its group's bucket (shared by the group's domains)
    accepted: list[Arrival] = field(default_factory=list)
    throttled: list[Arrival] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    parser: BytesHeaderParser = field(default_factory=BytesHeaderParser)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        bucket = self.buckets.get(address.rpartition("@")[2].lower())
        with self.lock:
            if bucket is not None and not bucket.take(time.monotonic()):
                self.throttled.append(Arrival(time.time(), address))
                return bucket.throttle.reply
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server, session, envelope):
        headers = self.parser.parsebytes(envelope.original_content)
        message_id, key = headers.get("Message-ID", ""), headers.get("Idempotency-Key", "")
        now = time.time()
        with self.lock:
            self.accepted += [Arrival(now, rcpt, message_id, key) for rcpt in envelope.rcpt_tos]
        return "250 2.0.0 OK"


class ThrottlingReceiver:
    """``with ThrottlingReceiver(Throttle({"gmail.com"}, per_minute=60)) as receiver:`` an SMTP
    server at ``receiver.url`` (for EMAIL_URL) or ``receiver.port``."""

    def __init__(self, *throttles: Throttle) -> None:
        buckets = {}
        for throttle in throttles:
            bucket = _Bucket(throttle, tokens=throttle.burst)
            buckets.update(dict.fromkeys(throttle.domains, bucket))
        self._handler = _Handler(buckets)
        self.port = free_port()
        self._controller: Controller | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self) -> ThrottlingReceiver:
        self._controller = Controller(self._handler, hostname="127.0.0.1", port=self.port)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> ThrottlingReceiver:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def accepted(self, domains: Iterable[str] | None = None) -> list[Arrival]:
        """The messages accepted (of these recipient domains only, if given), in order."""
        with self._handler.lock:
            arrivals = list(self._handler.accepted)
        return arrivals if domains is None else _of(arrivals, domains)

    def throttled(self, domains: Iterable[str] | None = None) -> list[Arrival]:
        """The recipients refused with a throttling answer, in order."""
        with self._handler.lock:
            arrivals = list(self._handler.throttled)
        return arrivals if domains is None else _of(arrivals, domains)

    def duplicates(self) -> dict[str, int]:
        """{Message-ID: times accepted} of the messages accepted more than once."""
        counts = Counter(arrival.message_id for arrival in self.accepted())
        return {message_id: n for message_id, n in counts.items() if n > 1}

    def reset(self) -> None:
        """Forget what was received, and fill every bucket (a new run against the same server)."""
        with self._handler.lock:
            self._handler.accepted.clear()
            self._handler.throttled.clear()
            for bucket in self._handler.buckets.values():
                bucket.tokens, bucket.first_at = bucket.throttle.burst, None


def _of(arrivals: list[Arrival], domains: Iterable[str]) -> list[Arrival]:
    wanted = {d.lower() for d in domains}
    return [arrival for arrival in arrivals if arrival.domain in wanted]
