from collections import Counter
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from growth.job_ids import parse_job_id
from growth.models import Campaign, Send

ORDER = [s.value for s in Send.Status]


class Command(BaseCommand):
    help = "Print what happened to a campaign's recipients (default: the latest campaign)."

    def add_arguments(self, parser):
        parser.add_argument("campaign_id", nargs="?", type=int)
        parser.add_argument("--outbox", type=Path,
                            help="A filemail:// directory: count what it received, and duplicates.")

    def handle(self, *args, campaign_id=None, outbox=None, **options):
        campaigns = Campaign.objects.select_related("account").order_by("-id")
        campaign = (campaigns.filter(id=campaign_id) if campaign_id else campaigns).first()
        if campaign is None:
            raise CommandError("No such campaign.")
        counts = Campaign.objects.progress([campaign.id]).get(campaign.id, {})
        audience = Campaign.objects.audience(campaign_id=campaign.id)
        total = sum(counts.values())
        out = self.stdout.write
        out(f"Campaign {campaign.id} “{campaign.name}” for {campaign.account}: {campaign.status}")
        out(f"  audience: {audience['subscriber_rows']:,} subscriber rows, "
            f"{audience['addresses']:,} distinct addresses "
            f"({audience['suppressed']:,} suppressed, "
            f"{audience['not_confirmed_rows']:,} with an unconfirmed row)")
        out(f"  {'recipients':<12}{total:>9,}")
        for status in ORDER:
            out(f"  {status:<12}{counts.get(status, 0):>9,}")
        if campaign.started_at and campaign.finished_at:
            seconds = (campaign.finished_at - campaign.started_at).total_seconds()
            out(f"  {'took':<12}{seconds:>8.1f}s  ({total / max(seconds, 1e-3):,.0f} recipients/s)")
        if outbox:
            keys = _keys_in(outbox, campaign.id)
            twice = sum(1 for n in keys.values() if n > 1)
            out(f"  outbox: {sum(keys.values()):,} messages, {len(keys):,} distinct recipients, "
                f"{twice} received twice")


def _keys_in(outbox: Path, campaign_id: int) -> Counter:
    """How many messages the outbox holds per job id of the campaign."""
    header = "Idempotency-Key: "
    keys: Counter = Counter()
    for path in sorted(outbox.glob("*.log")):
        with path.open(errors="replace") as lines:
            for line in lines:
                if line.startswith(header):
                    job = parse_job_id(line[len(header):])
                    if job is not None and job.campaign_id == campaign_id:
                        keys[job.job_id] += 1
    return keys
