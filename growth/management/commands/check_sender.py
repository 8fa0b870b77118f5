"""Is a tenant ready to send? SPF, DKIM and DMARC of its From domain as the DNS publishes them,
and one-click unsubscribe at SITE_URL (growth.deliverability.readiness says what each looks at).

Each check prints OK, WARN, MISSING, MISALIGNED or ERROR, what was found, and what to publish.
Exit status 0 when the sender is ready (nothing MISSING, MISALIGNED or ERROR), 1 when it is not,
2 for an unknown account, 3 when the database cannot be reached. The
tenant's reputation (bounce and complaint rates) is printed too, for information.
"""

from __future__ import annotations

from django.core.management.base import CommandError

from growth.deliverability import readiness
from growth.management.base import ASKED_WRONG, DatabaseCommand
from growth.models import Account
from growth.reputation import guard
from growth.sending.console import on_one_line

WIDTH = 12  # the status column


class Command(DatabaseCommand):
    help = ("Check a tenant's sender: SPF, DKIM and DMARC of its From domain, and one-click "
            "unsubscribe at SITE_URL. Exit status 0 when ready, 1 when not, 2 for an unknown "
            "account, 3 when the database cannot be reached.")

    def add_arguments(self, parser):
        parser.add_argument("--account", required=True, metavar="SLUG", help="The account's slug.")
        parser.add_argument("--timeout", type=float, default=5.0,
                            help="Seconds per DNS lookup and for the HTTPS probe (default 5).")

    def handle(self, *args, account: str, timeout: float, **options):
        tenant = Account.objects.filter(slug=account).first()
        if tenant is None:
            raise CommandError(f"There is no account {account!r}.", returncode=ASKED_WRONG)
        result = readiness.check_account(
            tenant, resolver=readiness.default_resolver(timeout=timeout, budget=max(30.0, 6 * timeout)),
            probe_timeout=timeout)
        self.stdout.write(f"Sender readiness of “{on_one_line(tenant.name)}” ({tenant.slug}), "
                          f"From {on_one_line(result.from_email)}")
        for check in result.checks:
            self._check(check)
        self._reputation(tenant.pk)
        if not result.ready:
            problems = len(result.problems)
            raise CommandError(f"{tenant.slug} is not ready to send: {problems} "
                               f"check{'s' if problems != 1 else ''} to fix.", returncode=1)
        self.stdout.write(self.style.SUCCESS(f"{tenant.slug} is ready to send."))

    def _check(self, check) -> None:
        status = check.status.ljust(WIDTH)
        if check.failing:
            status = self.style.ERROR(status)
        elif check.status == readiness.WARN:
            status = self.style.WARNING(status)
        else:
            status = self.style.SUCCESS(status)
        # a DNS record's text is anyone's: on one line, without controls
        self.stdout.write(f"  {status}{check.name} {on_one_line(check.subject)}: "
                          f"{on_one_line(check.summary)}")
        indent = " " * (WIDTH + 4)
        for line in check.details:
            self.stdout.write(f"{indent}{on_one_line(line)}")
        if check.publish:
            self.stdout.write(f"{indent}publish: {check.publish}")

    def _reputation(self, account_id: int) -> None:
        reputation = guard.reputation_of(account_id)
        if reputation is None:
            return
        self.stdout.write(f"Reputation over the last {reputation.window_days} days: "
                          f"{reputation.sends:,} messages sent")
        for rate in reputation.rates:
            state = {guard.UNJUDGED: f"not judged under {reputation.min_sends:,} sends"}.get(
                rate.state, rate.state.upper())
            self.stdout.write(f"  {rate.kind} rate {rate.percent:.2f} % ({rate.count:,} of "
                              f"{rate.base:,}; warn at {rate.warn_text} %, stop at "
                              f"{rate.stop_text} %): {state}")
