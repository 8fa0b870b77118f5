"""Compare the campaigns' tallies (what the admin, the monitor and the reports count) with their
rows, and recount them on request. The triggers keep them exact; only a write that bypassed
them (a restore with triggers off, session_replication_role = replica) can make them drift."""

from django.core.management.base import CommandError

from growth.management.base import DatabaseCommand
from growth.models import SendTally


class Command(DatabaseCommand):
    help = ("Check the campaigns' send tallies against their rows (default: every campaign); "
            "--repair recounts those that disagree. Reads every row: seconds per million.")

    def add_arguments(self, parser):
        parser.add_argument("campaign_ids", nargs="*", type=int, metavar="campaign_id")
        parser.add_argument("--repair", action="store_true",
                            help="Recount the campaigns that disagree (their sends' writers wait "
                                 "meanwhile).")

    def handle(self, *args, campaign_ids=(), repair=False, **options):
        differences = SendTally.objects.differences(list(campaign_ids) or None)
        if not differences:
            self.stdout.write("The tallies agree with the rows.")
            return
        for d in differences:
            minute = "not sent" if d.sent_minute is None else f"sent {d.sent_minute:%Y-%m-%d %H:%M}"
            self.stdout.write(f"campaign {d.campaign_id}, {d.status}, {minute}{d.reported}: tallied "
                              f"{d.tallied:,}, rows {d.counted:,}")
        wrong = sorted({d.campaign_id for d in differences})
        if not repair:
            raise CommandError(f"{len(wrong)} campaign(s) disagree: {wrong}; --repair recounts them.")
        SendTally.objects.repair(wrong)
        left = SendTally.objects.differences(wrong)
        if left:
            raise CommandError(f"still {len(left)} differences after the recount (writes that "
                               "bypass the triggers are going on?)")
        self.stdout.write(f"Recounted {len(wrong)} campaign(s): {wrong}.")
