import imaplib
import ipaddress
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError
from imap_tools.errors import ImapToolsError

from growth.bounces import mailbox
from growth.bounces.lmtp import BounceServer
from growth.management.arguments import seconds


class Command(BaseCommand):
    help = ("Record the bounces that come back by mail to BOUNCE_DOMAIN (VERP): delivery status "
            "notifications, feedback-loop complaints (ARF), auto-replies (ignored). Reads an "
            "IMAP mailbox (--imap, or BOUNCE_IMAP_URL) or accepts mail over LMTP/SMTP on a "
            "loopback port (--lmtp). Logs one line per message: attributed, unattributed, "
            "auto-reply ignored, forged token, no token, unparsed. Runs until SIGTERM or Ctrl-C.")

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--imap", metavar="URL",
                            help="imaps://user:password@host:993/INBOX (imap:// for STARTTLS); "
                                 "default: BOUNCE_IMAP_URL")
        source.add_argument("--lmtp", metavar="HOST:PORT",
                            help="accept bounces over LMTP here, e.g. 127.0.0.1:2525")
        parser.add_argument("--smtp", action="store_true",
                            help="with --lmtp: speak SMTP instead of LMTP")
        parser.add_argument("--once", action="store_true",
                            help="IMAP: one pass over the unseen messages, then exit; LMTP: exit "
                                 "after the first message delivered")
        parser.add_argument("--interval", type=seconds, default=60.0,
                            help="IMAP: seconds between passes (default: 60)")
        parser.add_argument("--processed-folder", default=mailbox.PROCESSED_FOLDER,
                            help="IMAP: where recorded messages go (default: %(default)s; an "
                                 "empty value: leave them where they are, marked seen)")
        parser.add_argument("--unparsed-folder", default=mailbox.UNPARSED_FOLDER,
                            help="IMAP: where messages that are no report go (default: %(default)s)")
        parser.add_argument("--unparsed-dir", type=Path, default=None,
                            help="LMTP: where messages that are no report are kept (default: "
                                 "DATA_DIR/bounces/unparsed)")

    def handle(self, *args, **options):
        if not settings.BOUNCE_DOMAIN:
            raise CommandError("BOUNCE_DOMAIN is not set: no bounce can be matched to its send.")
        if options["smtp"] and not options["lmtp"]:
            raise CommandError("--smtp goes with --lmtp HOST:PORT.")
        self.stopping = threading.Event()
        if options["lmtp"]:
            self._serve(options)
        else:
            url = options["imap"] or settings.BOUNCE_IMAP_URL
            if not url:
                raise CommandError("Give --imap URL or --lmtp HOST:PORT (or set BOUNCE_IMAP_URL).")
            self._read(url, options)

    @contextmanager
    def _until_signalled(self):
        """SIGTERM and Ctrl-C end the loop (the message in hand is finished first); run on
        another thread (a test's), the caller stops it by other means."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signum: signal.signal(signum, lambda *_: self.stopping.set())
                    for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _serve(self, options) -> None:
        host, _, port = options["lmtp"].rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            raise CommandError("--lmtp takes HOST:PORT, e.g. 127.0.0.1:2525")
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            self.stderr.write(f"Warning: {host} is not a loopback address; anyone who reaches it "
                              "can hand bounces in (signatures still decide what they change).")
        unparsed = options["unparsed_dir"] or Path(settings.DATA_DIR) / "bounces" / "unparsed"
        protocol = "SMTP" if options["smtp"] else "LMTP"
        try:
            server = BounceServer(host, int(port), lmtp=not options["smtp"],
                                  unparsed_dir=unparsed).start()
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from exc
        self.stdout.write(f"Accepting bounces for {settings.BOUNCE_DOMAIN} over {protocol} on "
                          f"{host}:{port}; unparsed messages kept in {unparsed}.")
        try:
            with self._until_signalled():
                while not self.stopping.is_set():
                    if options["once"] and server.handler.delivered.wait(0.2):
                        break
                    self.stopping.wait(0.2)
        finally:
            server.stop()
        outcomes = server.handler.outcomes
        summary = "".join(f", {n} {outcome}" for outcome, n in sorted(outcomes.items()))
        self.stdout.write(f"Stopped: {outcomes.total()} messages received{summary}.")

    def _read(self, url: str, options) -> None:
        try:
            address = mailbox.parse_url(url)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Reading bounces for {settings.BOUNCE_DOMAIN} from {address}.")
        with self._until_signalled():
            self._read_until_stopped(address, options)

    def _read_until_stopped(self, address: mailbox.ImapAddress, options) -> None:
        while not self.stopping.is_set():
            try:
                counts = self._pass(address, options)
                summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
                self.stdout.write(f"Pass done: {summary or 'no new message'}.")
            except (OperationalError, InterfaceError) as exc:
                self.stderr.write(f"Database unavailable ({exc}); the messages wait for the next pass.")
                if options["once"]:
                    raise CommandError("database unavailable") from exc
            except (OSError, ImapToolsError, imaplib.IMAP4.error) as exc:
                self.stderr.write(f"IMAP {address}: {exc}; trying again in {options['interval']:g} s.")
                if options["once"]:
                    raise CommandError(f"IMAP {address}: {exc}") from exc
            if options["once"]:
                return
            self.stopping.wait(options["interval"])

    def _pass(self, address: mailbox.ImapAddress, options):
        with mailbox.connect(address) as box:
            reader = mailbox.MailboxReader(box, processed_folder=options["processed_folder"],
                                           unparsed_folder=options["unparsed_folder"])
            return reader.run_once()

