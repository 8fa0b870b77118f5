"""What happened to a campaign's recipients, as figures a reader can add up on the page: the
audience down to the recipients (each address counted once, in the first bucket that applies),
then the recipients by what became of them."""

from collections import Counter
from pathlib import Path

from django.core.management.base import CommandError
from django.db.models import Count, Exists, OuterRef, Q

from growth.job_ids import parse_job_id
from growth.management.base import DatabaseCommand
from growth.models import Campaign, Send, Subscriber, Suppression
from growth.sending.console import on_one_line

LABEL = 58  # characters of a line's label

OUTCOMES = [  # every send status, in the order of a row's life, each said for a reader
    (Send.Status.SENT, "sent (accepted by the mail server)"),
    (Send.Status.FAILED, "failed (refused for good, or retried past the horizon)"),
    (Send.Status.SUPPRESSED, "suppressed at send time (opted out after the build)"),
    (Send.Status.UNKNOWN, "unknown (a worker died on the wire: review them)"),
    (Send.Status.CANCELLED, "cancelled (before they were sent)"),
    (Send.Status.QUEUED, "queued (still to send, or to retry)"),
    (Send.Status.SENDING, "sending (on the wire now)"),
]


class Command(DatabaseCommand):
    help = "Print what happened to a campaign's recipients (default: the latest campaign)."

    def add_arguments(self, parser):
        parser.add_argument("campaign_id", nargs="?", type=int,
                            help="The campaign (default: the latest one).")
        parser.add_argument("--outbox", type=Path,
                            help="A filemail:// directory: count what it received, and duplicates "
                                 "(default: none).")

    def handle(self, *args, campaign_id=None, outbox=None, **options):
        campaigns = Campaign.objects.select_related("account", "resend_of").order_by("-id")
        campaign = (campaigns if campaign_id is None else campaigns.filter(id=campaign_id)).first()
        if campaign is None:
            raise CommandError("No such campaign.")
        counts = Campaign.objects.progress([campaign.id]).get(campaign.id, {})
        recipients = sum(counts.values())
        self.stdout.write(f"Campaign {campaign.id} “{on_one_line(campaign.name)}” for "
                          f"{on_one_line(campaign.account)}: {campaign.status}")
        if campaign.resend_of_id:
            self._line(f"recipients, taken from campaign {campaign.resend_of_id} "
                       f"“{on_one_line(campaign.resend_of.name)}” (a follow-up)", recipients,
                       indent=2)
        else:
            self._audience(campaign, recipients)
        self.stdout.write("\nRecipients by outcome (one row, one message, per address)")
        for status, label in OUTCOMES:
            self._line(label, counts.get(status, 0))
        self._line("= recipients", recipients)
        if campaign.started_at and campaign.finished_at:
            seconds = (campaign.finished_at - campaign.started_at).total_seconds()
            self.stdout.write(f"Took {seconds:.1f}s, from start to finish "
                              f"({recipients / max(seconds, 1e-3):,.0f} recipients/s)")
        if outbox:
            keys = _keys_in(outbox, campaign.id)
            twice = sum(1 for n in keys.values() if n > 1)
            self.stdout.write(f"Outbox {outbox}: {sum(keys.values()):,} messages to "
                              f"{len(keys):,} distinct recipients (sent above: "
                              f"{counts.get(Send.Status.SENT, 0):,}), {twice:,} received twice")

    def _audience(self, campaign: Campaign, recipients: int) -> None:
        funnel = audience_funnel(campaign)
        built = campaign.recipients_built_at is not None
        self.stdout.write("Audience: the subscriber rows of the campaign's segments, as they are now")
        self._line("subscriber rows", funnel["rows"])
        self._line("- rows repeating an address (in two segments, say)",
                   funnel["rows"] - funnel["addresses"])
        self._line("= distinct addresses", funnel["addresses"])
        self._line("- not recipients: suppressed by the tenant", funnel["suppressed"])
        self._line("- not recipients: not confirmed (pending, unsubscribed)",
                   funnel["not_confirmed"])
        self._line("- not recipients: confirmed after the build" if built
                   else "- not recipients yet: the list is not built", funnel["confirmed_unbuilt"])
        if recipients != funnel["recipients"]:  # rows whose subscriber left the segments since
            self._line("= recipients from this audience", funnel["recipients"])
            self._line("+ recipients no longer in this audience", recipients - funnel["recipients"])
        self._line("= recipients", recipients)

    def _line(self, label: str, number: int, *, indent: int = 4) -> None:
        self.stdout.write(f"{' ' * indent}{label:<{LABEL}}{number:>10,}")


def audience_funnel(campaign: Campaign) -> dict[str, int]:
    """The campaign's audience in one aggregate: its subscriber rows, their distinct addresses,
    and each address in exactly one bucket: a recipient (it has a send row), else suppressed,
    else without a confirmed row, else confirmed but not built (it joined after the build)."""
    members = Subscriber.objects.filter(account_id=campaign.account_id)
    segments = list(campaign.segments.values_list("id", flat=True))
    if segments:
        members = members.filter(segment_id__in=segments)
    members = members.annotate(
        has_send=Exists(Send.objects.filter(campaign_id=campaign.id,
                                            email_lower=OuterRef("email_lower"))),
        on_list=Exists(Suppression.objects.filter(account_id=campaign.account_id,
                                                  email_lower=OuterRef("email_lower"))))
    unbuilt = Q(has_send=False, on_list=False)
    counted = members.aggregate(
        rows=Count("id"),
        addresses=Count("email_lower", distinct=True),
        recipients=Count("email_lower", distinct=True, filter=Q(has_send=True)),
        suppressed=Count("email_lower", distinct=True, filter=Q(has_send=False, on_list=True)),
        unbuilt=Count("email_lower", distinct=True, filter=unbuilt),
        confirmed_unbuilt=Count("email_lower", distinct=True, filter=unbuilt & Q(status="confirmed")))
    counted["not_confirmed"] = counted.pop("unbuilt") - counted["confirmed_unbuilt"]
    return counted


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
