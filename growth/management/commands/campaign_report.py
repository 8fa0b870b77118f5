from django.core.management.base import BaseCommand, CommandError

from growth.models import Campaign, Send

ORDER = [s.value for s in Send.Status]


class Command(BaseCommand):
    help = "Print what happened to a campaign's recipients (default: the latest campaign)."

    def add_arguments(self, parser):
        parser.add_argument("campaign_id", nargs="?", type=int)

    def handle(self, *args, campaign_id=None, **options):
        campaigns = Campaign.objects.select_related("account")
        campaign = (campaigns.filter(id=campaign_id) if campaign_id else campaigns.order_by("-id")).first()
        if campaign is None:
            raise CommandError("No such campaign.")
        counts = Campaign.objects.progress([campaign.id]).get(campaign.id, {})
        total = sum(counts.values())
        out = self.stdout.write
        out(f"Campaign {campaign.id} “{campaign.name}” for {campaign.account}: {campaign.status}")
        out(f"  {'recipients':<12}{total:>9,}")
        for status in ORDER:
            out(f"  {status:<12}{counts.get(status, 0):>9,}")
        if campaign.started_at and campaign.finished_at:
            seconds = (campaign.finished_at - campaign.started_at).total_seconds()
            rate = total / seconds if seconds else 0
            out(f"  {'took':<12}{seconds:>8.1f}s  ({rate:,.0f} recipients/s)")
