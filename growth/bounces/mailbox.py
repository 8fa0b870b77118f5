"""Reading bounces from an IMAP mailbox (imap-tools).

Each pass fetches the folder's unseen messages without marking them (BODY.PEEK), records each
(``record.process``, committed when it returns) and only then moves it to the processed folder,
or marks it seen when there is none. A message that is no report and no auto-reply, or that
the recording failed on for any reason but the database, goes to the unparsed folder for a
person: never deleted, never lost. When the database is away, the pass stops and leaves the
message unseen where it was: the next pass takes it again, and what it had recorded already
is then a duplicate that changes nothing.
"""

from __future__ import annotations

import imaplib
import logging
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from django.db import InterfaceError, OperationalError, close_old_connections

from growth.bounces.record import Outcome, Processed, process

logger = logging.getLogger("growth.bounces")

PROCESSED_FOLDER = "processed"
UNPARSED_FOLDER = "unparsed"
SEEN = "\\Seen"


@dataclass(frozen=True, slots=True)
class ImapAddress:
    scheme: str  # imaps (TLS), imap (STARTTLS), imap+plain (neither: loopback servers only)
    host: str
    port: int
    user: str
    password: str
    folder: str

    def __str__(self) -> str:  # never the password, in logs and errors
        return f"{self.scheme}://{self.user}@{self.host}:{self.port}/{self.folder}"


def parse_url(url: str) -> ImapAddress:
    """imaps://user:password@host:993/INBOX (the folder defaults to INBOX; user and password
    percent-encoded)."""
    parts = urlsplit(url)
    defaults = {"imaps": 993, "imap": 143, "imap+plain": 143}
    if parts.scheme not in defaults:
        raise ValueError(f"an IMAP URL starts imaps://, imap:// (STARTTLS) or imap+plain://, "
                         f"not {parts.scheme or 'nothing'}://")
    if not parts.hostname or not parts.username:
        raise ValueError("an IMAP URL names a user and a host: imaps://user:password@host/INBOX")
    try:
        port = parts.port or defaults[parts.scheme]
    except ValueError as exc:
        raise ValueError(f"bad port in the IMAP URL: {exc}") from exc
    return ImapAddress(scheme=parts.scheme, host=parts.hostname, port=port,
                       user=unquote(parts.username), password=unquote(parts.password or ""),
                       folder=unquote(parts.path.lstrip("/")) or "INBOX")


def connect(address: ImapAddress, *, timeout: float = 60.0):
    """A logged-in imap-tools MailBox on the address's folder."""
    from imap_tools import MailBox, MailBoxStartTls, MailBoxUnencrypted

    if address.scheme == "imaps":
        box = MailBox(address.host, address.port, timeout=timeout,
                      ssl_context=ssl.create_default_context())
    elif address.scheme == "imap":
        box = MailBoxStartTls(address.host, address.port, timeout=timeout,
                              ssl_context=ssl.create_default_context())
    else:
        box = MailBoxUnencrypted(address.host, address.port, timeout=timeout)
    return box.login(address.user, address.password, initial_folder=address.folder)


_GONE = object()


class MailboxReader:
    """Processes a mailbox's unseen messages; ``mailbox`` is an imap-tools MailBox (or anything
    with its uids, fetch, move, flag and folder.exists/create)."""

    def __init__(self, mailbox, *, processed_folder: str | None = PROCESSED_FOLDER,
                 unparsed_folder: str = UNPARSED_FOLDER, batch: int = 200,
                 recorder: Callable[..., Processed] = process) -> None:
        self.mailbox = mailbox
        self.processed_folder = processed_folder or None
        self.unparsed_folder = unparsed_folder
        self.batch = batch
        self.recorder = recorder
        self._folders_ready = False

    def run_once(self) -> Counter:
        """One pass over the unseen messages (at most ``batch``); return the outcomes counted.
        A database error ends the pass early, the message left unseen (and is raised)."""
        from imap_tools import AND

        self._ensure_folders()
        counts: Counter = Counter()
        for uid in self.mailbox.uids(AND(seen=False))[:self.batch]:
            message = self._fetch(uid)
            if message is _GONE:
                continue
            counts[Outcome.UNPARSED if message is None else self._one(message)] += 1
        return counts

    def _fetch(self, uid: str):
        """The message, parsed: imap-tools parses while it fetches, so one that Python's parser
        cannot read (a RecursionError, from a MIME nesting a few thousand deep) raised out of
        the whole pass, and stayed unseen to stop every later pass. Fetched one by one, such a
        message goes to the unparsed folder (None). _GONE: no longer unseen in the inbox."""
        from imap_tools import AND
        from imap_tools.errors import ImapToolsError

        try:
            return next(iter(self.mailbox.fetch(AND(uid=uid, seen=False), mark_seen=False)),
                        _GONE)
        except (ImapToolsError, imaplib.IMAP4.error, OSError):
            raise  # the server or the connection: the pass ends, the message stays unseen
        except Exception:
            logger.exception("bounce message %s cannot be parsed; moved to %r for a person",
                             uid, self.unparsed_folder)
            self.mailbox.move(uid, self.unparsed_folder)
            return None

    def _one(self, message) -> Outcome:
        close_old_connections()  # a long-running loop: drop a connection the server closed
        try:
            processed = self.recorder(message.obj)
        except (OperationalError, InterfaceError):
            logger.warning("database unavailable: bounce message %s left unseen for the next pass",
                           message.uid)
            raise
        except Exception:
            logger.exception("recording bounce message %s failed; moved to %r for a person",
                             message.uid, self.unparsed_folder)
            self.mailbox.move(message.uid, self.unparsed_folder)
            return Outcome.UNPARSED
        # committed: only now may the message leave the unseen ones
        if processed.outcome is Outcome.UNPARSED:
            self.mailbox.move(message.uid, self.unparsed_folder)
        elif self.processed_folder:
            self.mailbox.move(message.uid, self.processed_folder)
        else:
            self.mailbox.flag(message.uid, SEEN, True)
        return processed.outcome

    def _ensure_folders(self) -> None:
        if self._folders_ready:
            return
        for folder in (self.processed_folder, self.unparsed_folder):
            if folder and not self.mailbox.folder.exists(folder):
                self.mailbox.folder.create(folder)
        self._folders_ready = True
