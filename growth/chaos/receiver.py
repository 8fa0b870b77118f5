"""A real SMTP server on loopback that logs every message it receives, append-only, and can be
told to misbehave: answer a fraction with 4xx, drop the connection instead of answering DATA,
think slowly. In idempotent mode it de-duplicates on Idempotency-Key, as providers do."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from dataclasses import asdict, dataclass
from email.parser import BytesHeaderParser
from pathlib import Path

from aiosmtpd.controller import Controller

ACCEPTED = "accepted"  # delivered to the mailbox
ABSORBED = "absorbed"  # a resend of a key already delivered: answered 250, not delivered again
TEMPFAIL = "tempfail"  # answered 4xx
DROPPED = "dropped"  # connection cut instead of an answer


@dataclass(frozen=True, slots=True)
class Received:
    at: float  # time.time()
    verdict: str
    key: str
    message_id: str
    rcpt: str


@dataclass(frozen=True, slots=True)
class Misbehaviour:
    tempfail_rate: float = 0.0
    drop_rate: float = 0.0
    slow_rate: float = 0.0
    slow_delay: float = 0.0  # seconds


class ChaosReceiver:
    def __init__(self, log_path: Path, *, dedup: bool, faults: Misbehaviour, seed: int = 0) -> None:
        self.log_path = log_path
        self.dedup = dedup
        self.faults = faults
        self.received: list[Received] = []
        self._delivered: set[str] = set()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._log = log_path.open("a", buffering=1)
        self._parser = BytesHeaderParser()
        self.port = free_port()
        self._controller: Controller | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self) -> ChaosReceiver:
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
        self._log.close()

    def delivered_count(self) -> int:
        with self._lock:
            return len(self._delivered)

    async def handle_DATA(self, server, session, envelope):
        headers = self._parser.parsebytes(envelope.original_content)
        key, message_id = headers.get("Idempotency-Key", ""), headers.get("Message-ID", "")
        with self._lock:
            roll, slow = self._rng.random(), self._rng.random() < self.faults.slow_rate
        if slow:
            await asyncio.sleep(self.faults.slow_delay)
        if roll < self.faults.drop_rate:
            self._record(DROPPED, key, message_id, envelope)
            server.transport.abort()
            return "421 4.4.2 connection dropped"
        if roll < self.faults.drop_rate + self.faults.tempfail_rate:
            self._record(TEMPFAIL, key, message_id, envelope)
            return "451 4.3.0 chaos says: try again later"
        with self._lock:
            verdict = ABSORBED if self.dedup and key in self._delivered else ACCEPTED
            self._delivered.add(key)
        self._record(verdict, key, message_id, envelope)
        return "250 2.0.0 OK"

    def _record(self, verdict: str, key: str, message_id: str, envelope) -> None:
        entry = Received(time.time(), verdict, key, message_id, ",".join(envelope.rcpt_tos))
        with self._lock:
            self.received.append(entry)
            self._log.write(json.dumps(asdict(entry)) + "\n")


def free_port() -> int:
    """A TCP port on loopback that nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
