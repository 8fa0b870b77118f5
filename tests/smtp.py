"""A real SMTP server on loopback (aiosmtpd) that records what it accepts."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


@dataclass
class Accepted:
    recipient: str
    idempotency_key: str
    message_id: str
    message: Message
    envelope_from: str = ""


@dataclass
class RecordingHandler:
    """Accepts every message except those the test scripted to fail.

    ``replies`` maps a recipient address to a list of SMTP replies to give on its next DATA
    commands, e.g. ["451 try later"] or ["550 no such user"]; once used up, it accepts.
    """

    accepted: list[Accepted] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)  # Message-ID of every DATA received
    replies: dict[str, list[str]] = field(default_factory=dict)
    delay: float = 0.0  # seconds to think before answering DATA
    lock: threading.Lock = field(default_factory=threading.Lock)
    thinking: int = 0  # messages whose DATA is being answered now (over all connections)
    most_at_once: int = 0  # the most there ever were
    pipelining: bool = True  # advertise PIPELINING (RFC 2920), as real relays do

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname
        if self.pipelining:
            responses.insert(-1, "250-PIPELINING")
        return responses

    async def handle_DATA(self, server, session, envelope):
        message = message_from_bytes(envelope.original_content)
        if self.delay:
            with self.lock:
                self.thinking += 1
                self.most_at_once = max(self.most_at_once, self.thinking)
            await asyncio.sleep(self.delay)
            with self.lock:
                self.thinking -= 1
        with self.lock:
            self.attempts.append(message["Message-ID"])
            for rcpt in envelope.rcpt_tos:
                scripted = self.replies.get(rcpt.lower())
                if scripted:
                    return scripted.pop(0)
            for rcpt in envelope.rcpt_tos:
                self.accepted.append(Accepted(rcpt, message["Idempotency-Key"],
                                              message["Message-ID"], message, envelope.mail_from))
        return "250 OK"

    def keys(self) -> Counter:
        with self.lock:
            return Counter(a.idempotency_key for a in self.accepted)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SMTPServer:
    def __init__(self) -> None:
        self.handler = RecordingHandler()
        self.port = free_port()
        self.options: dict = {}  # aiosmtpd's SMTP options (require_login)
        self.logins: list[str] = []  # every AUTH attempt's user name
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self) -> SMTPServer:
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port,
                                     **self.options)
        self.controller.start()
        return self

    def require_login(self, user: str, password: str) -> None:
        """Restart as a relay that takes mail only after AUTH as ``user`` (offered without TLS,
        on loopback): "535 5.7.8 Authentication credentials invalid" to any other login, "530
        5.7.0 Authentication required" to MAIL FROM without one."""
        def check(server, session, envelope, mechanism, auth_data) -> AuthResult:
            self.logins.append(auth_data.login.decode())
            return AuthResult(success=auth_data == LoginPassword(user.encode(), password.encode()),
                              handled=False)

        self.stop()
        self.options = {"authenticator": check, "auth_required": True, "auth_require_tls": False}
        self.start()

    def stop(self) -> None:
        self.controller.stop()
