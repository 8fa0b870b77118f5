"""Scenarios: the states tests start from (an approved campaign, rows left unknown by a dead
worker, an operator of some tenants), built through the engine's own calls where the state has a
way of coming about."""

from __future__ import annotations

from collections import Counter

from django.utils import timezone

from growth.models import Account, Campaign, Segment, Send, Subscriber
from tests.factories import CampaignFactory, SegmentFactory, UserFactory


def audience(account: Account, count: int, *, segment: Segment | None = None,
             prefix: str = "person") -> list[Subscriber]:
    """Create ``count`` confirmed subscribers in one segment (bulk, for speed)."""
    from growth.audience.addresses import parse_address

    segment = segment or SegmentFactory(account=account)
    rows = []
    for n in range(count):
        address = parse_address(f"{prefix}{n}@example.com")
        rows.append(Subscriber(account=account, segment=segment, email=address.email,
                               email_lower=address.email_lower, status="confirmed"))
    return Subscriber.objects.bulk_create(rows)


def approved_campaign(count: int = 10, **kwargs) -> Campaign:
    """An approved campaign, due now, over ``count`` fresh confirmed subscribers."""
    from growth.operations.campaigns import approve_campaign

    campaign = CampaignFactory(**kwargs)
    audience(campaign.account, count)
    approve_campaign(campaign_id=campaign.id)
    campaign.refresh_from_db()
    return campaign


def sending_campaign(count: int = 10, *, leases: bool = False, **kwargs) -> Campaign:
    """A campaign started and built: ``count`` rows queued (``leases``: for the lease
    protocol)."""
    campaign = approved_campaign(count, **kwargs)
    assert Campaign.objects.start_due() == [campaign.id]
    assert Send.objects.build_recipients(campaign_id=campaign.id, leases=leases) == count
    campaign.refresh_from_db()
    return campaign


def statuses(campaign: Campaign) -> dict[str, int]:
    """The campaign's rows per status as an operator reads them (on the lease protocol, a live
    lease's rows count as on the wire, 'sending')."""
    return Campaign.objects.progress([campaign.id]).get(campaign.id, {})


def rows_by_status(campaign: Campaign) -> dict[str, int]:
    """The campaign's rows per status as the rows themselves say (a lease's stay 'queued')."""
    return dict(Counter(Send.objects.filter(campaign=campaign).values_list("status", flat=True)))


def make_unknown(count: int) -> list[int]:
    """Claim, hand over and lose ``count`` queued rows to a dead worker with a plain receiver: the
    way rows really become unknown."""
    claimed = Send.objects.claim(worker_id="dead", batch_size=count, lease=60)
    Send.objects.hand_over(claimed, worker_id="dead")
    Send.objects.filter(status="sending").update(
        lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
    recovered = Send.objects.recover_expired(idempotent=False, max_attempts=5)
    assert {row.status for row in recovered} == {"unknown"}
    return sorted(row.id for row in claimed)


def finished_campaign_with_unknown_rows(count: int = 4, unknown: int = 2) -> tuple[Campaign, list[int]]:
    """A campaign the worker finished with ``unknown`` of its ``count`` rows left unknown."""
    from growth.sending.transports.null import NullTransport
    from growth.sending.worker import Worker

    campaign = sending_campaign(count=count)
    lost = make_unknown(unknown)
    Worker(worker_id="w", transport=NullTransport(), batch_size=count).cycle()
    expected = {"sent": count - unknown, "unknown": unknown}
    assert statuses(campaign) == {status: n for status, n in expected.items() if n}
    campaign.refresh_from_db()
    assert campaign.status == "sent"
    return campaign, lost


def operator(*accounts: Account, perms: str | list[str] = "all", viewer_of: tuple = (), **kwargs):
    """A staff user, editor of ``accounts`` and viewer of ``viewer_of``, with the growth app's
    model permissions (``perms="all"``) or only those listed (codenames, e.g. ["view_send"])."""
    from django.contrib.auth.models import Permission

    from growth.models import Membership

    user = UserFactory(is_staff=True, **kwargs)
    permissions = Permission.objects.filter(content_type__app_label="growth")
    if perms != "all":
        permissions = permissions.filter(codename__in=perms)
    user.user_permissions.set(permissions)
    for account in accounts:
        Membership.objects.create(user=user, account=account)
    for account in viewer_of:
        Membership.objects.create(user=user, account=account, role=Membership.Role.VIEWER)
    return user


def member(account: Account, *, role: str = "editor", **kwargs):
    """A tenant user (not staff) with a membership of ``account``."""
    from growth.models import Membership

    user = UserFactory(**kwargs)
    Membership.objects.create(user=user, account=account, role=role)
    return user


def run_worker(**options):
    """A real worker until idle, quick to notice the end (small batches, short tick)."""
    from growth.sending.worker import Worker

    options = {"batch_size": 7, "tick": 0.05, "lease": 30, "until_idle": True, **options}
    worker = Worker(**options)
    worker.run()
    return worker


def pausing_once(campaign: Campaign):
    """A mail transport (Django's, from the settings) that pauses ``campaign`` as its first batch
    goes out: an operator's pause landing mid-send."""
    from growth.sending.transports.django_mail import DjangoMailTransport

    class PauseOnce(DjangoMailTransport):
        paused = False

        def send_bulk(self, deliveries):
            if not self.paused:
                self.paused = Campaign.objects.pause(campaign_id=campaign.id)
            return super().send_bulk(deliveries)

    return PauseOnce()
