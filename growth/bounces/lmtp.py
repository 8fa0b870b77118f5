"""Taking bounces over LMTP (or SMTP) on a loopback port, with aiosmtpd: the bounce domain's
mail server (Postfix ``transport_maps``: ``bounces.example lmtp:inet:127.0.0.1:2525``, Exim an
``lmtp`` or ``smtp`` transport) hands each message to ``run_bounces --lmtp``.

Only recipients at BOUNCE_DOMAIN are accepted, up to MAX_RECIPIENTS a message (the mail server
delivers the rest in another), and a message is parsed once whatever their number. A message is
answered 250 once it is recorded (committed); when the database is away, 451, and the mail
server delivers it again later. LMTP answers once per recipient, so one recipient's failure does
not redeliver the others. A message that is no report (or that recording failed on for another
reason than the database) is accepted and written to the unparsed directory for a person: never
lost.

The recording runs on one thread of its own (the ORM is synchronous, and one database
connection serves every delivery in turn), not on the server's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import SMTP
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connections

from growth.bounces import mime
from growth.bounces.record import Outcome, Processed, process

logger = logging.getLogger("growth.bounces")

DATA_SIZE_LIMIT = 25 * 1024 * 1024  # bytes: a bounce with its original attached, generously
# A report goes to one bounce address; RFC 5321 has a server take at least 100 recipients, and
# past that a 452 makes the client send the rest in another transaction.
MAX_RECIPIENTS = 100


class BounceHandler:
    """aiosmtpd's handler: accepts mail for the bounce domain and records it."""

    def __init__(self, *, lmtp: bool, unparsed_dir: Path | None,
                 recorder: Callable[..., Processed] = process) -> None:
        self.lmtp = lmtp
        self.unparsed_dir = unparsed_dir
        self.recorder = recorder
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bounces-db")
        self.delivered = threading.Event()  # set after each message, for --once
        self.outcomes: Counter = Counter()  # of the messages received, by outcome

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        _, _, domain = address.rpartition("@")
        if not settings.BOUNCE_DOMAIN or domain.lower().rstrip(".") != settings.BOUNCE_DOMAIN:
            return "550 5.1.1 Not a bounce address of this server"
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        loop = asyncio.get_running_loop()
        content = envelope.original_content
        message = await loop.run_in_executor(self.executor, _parsed, content)
        replies = []
        for recipient in envelope.rcpt_tos:
            replies.append(await loop.run_in_executor(
                self.executor, self._record, message, content, recipient))
        self.delivered.set()
        if self.lmtp:
            return "\r\n".join(replies)
        # SMTP has one reply for all: a failure for one makes the sender try them all again,
        # and those recorded already are duplicates then
        return next((reply for reply in replies if not reply.startswith("2")), replies[0])

    def _record(self, message: Message | bytes, content: bytes, recipient: str) -> str:
        close_old_connections()
        try:
            processed = self.recorder(message, envelope_recipients=[recipient])
        except (OperationalError, InterfaceError):
            logger.warning("database unavailable: bounce for %s refused with 451, the mail "
                           "server will deliver it again", recipient, exc_info=True)
            close_old_connections()
            return "451 4.3.0 Cannot record bounces now, try again later"
        except Exception:
            logger.exception("recording the bounce for %s failed; keeping it as unparsed", recipient)
            return self._keep(content)
        self.outcomes[processed.outcome] += 1
        if processed.outcome is Outcome.UNPARSED:
            return self._keep(content)
        return "250 2.0.0 Recorded"

    def _keep(self, content: bytes) -> str:
        if self.unparsed_dir is None:
            return "250 2.0.0 Accepted (not a report; dropped as configured)"
        try:
            self.unparsed_dir.mkdir(parents=True, exist_ok=True)
            # anyone can mail the bounce domain: what is kept for a person is bounded, and past
            # the bound the mail server keeps the message in its queue until someone looks
            kept = sum(entry.stat().st_size for entry in os.scandir(self.unparsed_dir)
                       if entry.is_file())
            if kept + len(content) > settings.BOUNCE_UNPARSED_MAX_MB * 1024 * 1024:
                logger.error("the unparsed bounces in %s fill BOUNCE_UNPARSED_MAX_MB (%s MB): "
                             "refused with 452 until a person clears them", self.unparsed_dir,
                             settings.BOUNCE_UNPARSED_MAX_MB)
                return "452 4.3.1 Too many messages kept for a person, try again later"
            digest = hashlib.sha256(content).hexdigest()[:16]
            path = self.unparsed_dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{digest}.eml"
            path.write_bytes(content)
        except OSError:
            logger.exception("cannot keep an unparsed bounce in %s", self.unparsed_dir)
            return "451 4.3.0 Cannot keep this message now, try again later"
        logger.warning("unparsed bounce kept as %s", path)
        return "250 2.0.0 Kept for a person"

    def close(self) -> None:
        """Close the recording thread's database connection, then the thread."""
        self.executor.submit(connections.close_all).result()
        self.executor.shutdown(wait=True)


def _parsed(content: bytes) -> Message | bytes:
    """The message parsed, for every recipient's recording; as it came if parsing fails (the
    recording then says why it is unreadable)."""
    try:
        return mime.read(content)
    except Exception:  # a hostile message (nesting past the recursion limit, say)
        return content


class _Controller(Controller):
    def __init__(self, handler: BounceHandler, **kwargs) -> None:
        super().__init__(handler, **kwargs)
        self.lmtp = handler.lmtp

    def factory(self):
        server_class = LMTP if self.lmtp else SMTP
        return server_class(self.handler, **self.SMTP_kwargs)


class BounceServer:
    """The LMTP (or SMTP) server, run on a thread: ``start()``, ``stop()``."""

    def __init__(self, host: str, port: int, *, lmtp: bool = True,
                 unparsed_dir: Path | None = None,
                 recorder: Callable[..., Processed] = process) -> None:
        self.host, self.port = host, port
        self.handler = BounceHandler(lmtp=lmtp, unparsed_dir=unparsed_dir, recorder=recorder)
        self.controller = _Controller(self.handler, hostname=host, port=port,
                                      data_size_limit=DATA_SIZE_LIMIT,
                                      server_hostname=settings.BOUNCE_DOMAIN or None)

    def start(self) -> BounceServer:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()
        self.handler.close()
