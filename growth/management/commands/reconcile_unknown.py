from pathlib import Path

from django.core.management.base import CommandError

from growth.management.base import DatabaseCommand
from growth.models import Campaign
from growth.reconcile.evidence import EvidenceError
from growth.reconcile.service import Report, Source, reconcile
from growth.sending.console import on_one_line

LISTED = 20  # addresses still unknown listed one by one; beyond, a count


class Command(DatabaseCommand):
    help = ("Settle a campaign's sends in doubt (unknown) on what the SMTP relay recorded: those "
            "whose Message-ID it accepted become sent, with the evidence; --retry-rest queues the "
            "rest again with the same key (a possible duplicate where it had accepted one).")

    def add_arguments(self, parser):
        parser.add_argument("--campaign", type=int, required=True, metavar="ID")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--postfix-log", type=Path, metavar="FILE",
                            help="Postfix's mail log (or an excerpt; .gz is read as it is)")
        source.add_argument("--exim-log", type=Path, metavar="FILE", help="Exim's main log")
        source.add_argument("--message-ids", type=Path, metavar="FILE",
                            help="the Message-IDs the relay accepted, one a line")
        parser.add_argument("--retry-rest", action="store_true",
                            help="queue the campaign's other unknown sends again with the same key "
                                 "(never one a follow-up campaign took)")
        parser.add_argument("--dry-run", action="store_true", help="say what would be done")

    def handle(self, *args, campaign, retry_rest, dry_run, **options):
        found = Campaign.objects.filter(id=campaign).first()
        if found is None:
            raise CommandError(f"No campaign {campaign}.")
        kind = next(k for k in ("postfix_log", "exim_log", "message_ids") if options.get(k))
        source = Source(kind.replace("_", "-"), options[kind])
        try:
            report = reconcile(campaign_id=campaign, source=source, retry_rest=retry_rest,
                               dry_run=dry_run)
        except EvidenceError as exc:
            raise CommandError(f"{exc}. Nothing was changed.") from exc
        self._print(found, report, retry_rest=retry_rest)

    def _print(self, campaign: Campaign, report: Report, *, retry_rest: bool) -> None:
        out = self.stdout.write
        evidence = report.evidence
        would = "would be " if report.dry_run else ""
        if report.dry_run:
            out("Dry run: nothing was changed.")
        out(f"Campaign {campaign.id} “{on_one_line(campaign.name)}”, {report.source}: "
            f"{evidence.lines:,} lines read.")
        out(f"  {len(report.marked_sent)} {would}marked sent: the relay accepted them")
        if report.refused:
            out(f"  {len(report.refused)} refused by the relay: not marked sent")
        counted = evidence.counted
        if counted["not in doubt"]:
            out(f"  {counted['not in doubt']:,} of this campaign's Message-IDs name no send in "
                "doubt (already settled): left alone")
        out(f"  {counted['other campaigns']:,} Message-IDs of other campaigns and "
            f"{counted['not ours']:,} not ours: ignored")
        out(f"  {evidence.lines - evidence.used:,} lines ignored (other programs, other messages)")
        if retry_rest:
            out(f"  {report.retried} {would}queued again with the same key")
            if report.campaign_cancelled:
                out("  none is retried: the campaign is cancelled")
            if report.reopened:
                out(f"  the campaign had finished, and {'would go' if report.dry_run else 'went'} "
                    "back to sending for them")
        if report.taken_by_follow_up:
            out(f"  {len(report.taken_by_follow_up)} taken by a follow-up campaign: never retried "
                "here")
        still = report.still_unknown
        out(f"  {len(still)} still unknown" + (":" if 0 < len(still) <= LISTED else ""))
        if len(still) <= LISTED:
            for row in still:
                out(f"    {row.email}")
        if not retry_rest and len(still) > len(report.taken_by_follow_up):
            out("--retry-rest queues them again with the same key (but those a follow-up took).")
