import sys
from pathlib import Path

from django.core.management.base import BaseCommand
from django.db import connection

from growth.chaos.harness import ChaosConfig, run

DATABASE = "zylior_chaos"


class Command(BaseCommand):
    help = ("Send a campaign through real run_sender processes while killing them, restarting the "
            "database, failing SMTP and opting recipients out; audit the receiver; exit 1 on loss, "
            "duplicates or a delivery after an opt-out.")

    def add_arguments(self, parser):
        parser.add_argument("--recipients", type=int, default=50_000)
        parser.add_argument("--workers", type=int, default=3)
        parser.add_argument("--mode", choices=["plain", "idempotent", "both"], default="both")
        parser.add_argument("--kill-every", type=float, default=3.0, help="Seconds between SIGKILLs.")
        parser.add_argument("--lease", type=float, default=3.0, help="Seconds.")
        parser.add_argument("--out", type=Path, default=Path(".data/chaos"))
        parser.add_argument("--no-chart", action="store_true")
        parser.add_argument("--pgbouncer", action="store_true",
                            help="Workers reach PostgreSQL through PgBouncer in transaction pooling "
                                 "mode (Debian's pgbouncer, started here on a loopback port).")
        parser.add_argument("--protocol", choices=["rows", "leases"], default="leases",
                            help="The send protocol the workers build the campaign for "
                                 "(SENDER_PROTOCOL).")
        parser.add_argument("--keep-database", action="store_true",
                            help=f"Run in the configured database instead of a fresh {DATABASE!r}.")

    def handle(self, *args, **options):
        if not options["keep_database"]:
            self._fresh_database()
        modes = ["plain", "idempotent"] if options["mode"] == "both" else [options["mode"]]
        failed = False
        for mode in modes:
            config = ChaosConfig(recipients=options["recipients"], workers=options["workers"],
                                 idempotent=mode == "idempotent", kill_every=options["kill_every"],
                                 lease=options["lease"], out_dir=options["out"],
                                 chart=not options["no_chart"], pgbouncer=options["pgbouncer"],
                                 protocol=options["protocol"])
            self.stdout.write(f"\n== chaos, {mode} receiver: {config.recipients:,} recipients, "
                              f"{config.workers} workers, {config.protocol} protocol"
                              + (", through PgBouncer (transaction pooling)" if config.pgbouncer
                                 else "") + " ==")
            report = run(config)
            table = report.table()
            self.stdout.write(table)
            (config.out_dir / f"report-{mode}.md").write_text(table + "\n")
            if report.unknown_keys:
                listing = config.out_dir / f"unknown-{mode}.txt"
                listing.write_text("\n".join(report.unknown_keys) + "\n")
                shown = ", ".join(report.unknown_keys[:10])
                more = len(report.unknown_keys) - 10
                self.stdout.write(f"unknown rows, for an operator: {shown}"
                                  + (f" … and {more} more, all in {listing}" if more > 0 else ""))
            problems = report.problems()
            if problems:
                failed = True
                self.stdout.write(self.style.ERROR("FAILED: " + "; ".join(problems)))
                if report.lost_keys:
                    self.stdout.write(f"lost: {', '.join(report.lost_keys[:50])}")
            else:
                self.stdout.write(self.style.SUCCESS("PASSED"))
        self.stdout.write(f"\nreceiver logs, worker logs, reports and charts: {options['out']}/")
        if failed:
            sys.exit(1)

    def _fresh_database(self) -> None:
        """Create (or re-create) an empty, migrated database and use it from here on."""
        connection.settings_dict["TEST"] = {**connection.settings_dict.get("TEST", {}),
                                            "NAME": DATABASE}
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        self.stdout.write(f"fresh database {DATABASE!r} ready")
