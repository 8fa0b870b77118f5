import gc
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from growth.management.arguments import port, seconds
from growth.observability.health import migrations_pending
from growth.sending.worker import Worker, default_worker_id


class Command(BaseCommand):
    help = ("Run the campaign sender: start due campaigns, build, claim, deliver, settle, finish. "
            "By default it runs until SIGTERM or Ctrl-C (what is on the wires is finished first), "
            "printing each campaign's progress every few seconds; messages go where EMAIL_URL "
            "says (consolemail:// and filemail:// send nothing, and it warns so at start).")

    def add_arguments(self, parser):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true",
                          help="Run one cycle and exit (default: keep running).")
        mode.add_argument("--until-idle", action="store_true",
                          help="Exit once no campaign is due or sending; paused ones do not count "
                               "(default: keep running).")
        parser.add_argument("--batch-size", type=int, default=20,
                            help="Rows claimed per batch (default: 20).")
        parser.add_argument("--tick", type=seconds, default=60.0,
                            help="Seconds to sleep when idle; a full batch goes on at once "
                                 "(default: 60).")
        parser.add_argument("--lease", type=seconds, default=None,
                            help="Seconds a claimed row stays ours (default: SENDER_LEASE, "
                                 f"now {settings.SENDER_LEASE:g}).")
        parser.add_argument("--connections", type=int, default=None,
                            help="Connections to the mail server or ESP used at once, each with "
                                 "its own chunk; a kill leaves at most this many chunks in doubt "
                                 f"(default: SENDER_CONNECTIONS, now {settings.SENDER_CONNECTIONS}).")
        parser.add_argument("--worker-id", default=None,
                            help=f"Name in claimed_by (default host:pid, e.g. {default_worker_id()}).")
        parser.add_argument("--metrics-port", type=port, default=None,
                            help="Serve Prometheus metrics on this port (default: none).")
        parser.add_argument("--metrics-addr", default="127.0.0.1",
                            help="Address the metrics port listens on (default: 127.0.0.1).")
        parser.add_argument("--heartbeat-file", type=Path, default=None,
                            help="Touch this file at every heartbeat, for a container's liveness "
                                 "probe (default: none; the heartbeat is in the database).")

    def handle(self, *args, **options):
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        if options["connections"] is not None and options["connections"] < 1:
            raise CommandError("--connections must be at least 1")
        try:
            pending = migrations_pending()
        except DatabaseError:
            pending = 0  # away for now: the worker waits for it
        if pending:
            raise CommandError(f"The database lacks {pending} migration"
                               f"{'s' if pending != 1 else ''}: run manage.py migrate first.")
        if options["metrics_port"] is not None:
            from prometheus_client import start_http_server

            try:
                start_http_server(options["metrics_port"], addr=options["metrics_addr"])
            except OSError as exc:  # taken, or an address this host does not have
                raise CommandError(f"cannot serve metrics on {options['metrics_addr']}:"
                                   f"{options['metrics_port']}: {exc.strerror or exc}") from exc
        worker = Worker(worker_id=options["worker_id"], batch_size=options["batch_size"],
                        tick=options["tick"], lease=options["lease"],
                        once=options["once"], until_idle=options["until_idle"],
                        heartbeat_file=options["heartbeat_file"],
                        connections=options["connections"])
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: worker.stop())
        # What start-up loaded (Django, the app, the drivers: 130,000+ objects) lives as long as
        # the process. Frozen, it is no longer walked by each full collection that the messages'
        # short-lived objects set off: 4 of them took 366 ms of a 4.5 s run of 50,000 recipients
        # (null transport), 10 ms frozen.
        gc.freeze()
        worker.run()
