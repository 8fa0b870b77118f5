"""A provider that throttles, end to end: three real workers (threads, each on its own database
connection) send one campaign through a real SMTP server on loopback that refuses Gmail's mail
beyond a low rate with "421 4.7.28 ... unusual rate" for a while (growth.chaos.throttling), and
accepts everyone else's. The engine must slow Google down alone, through the bucket all workers
share, and still deliver every message exactly once, without counting the deferrals as attempts.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from django.core.mail import EmailMessage

from growth.chaos.throttling import Throttle, ThrottlingReceiver
from growth.models import Campaign, RateLimit, RateLimitChange, Send, Subscriber
from growth.operations.campaigns import approve_campaign
from growth.sending.transports import Delivery, Outcome
from growth.sending.transports.django_mail import DjangoMailTransport
from tests.factories import CampaignFactory, SegmentFactory
from tests.helpers import concurrently
from tests.scenarios import run_worker, statuses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

GMAIL, OTHER = "gmail.com", "outlook.com"  # by the static table: google, microsoft
PER_DOMAIN = 150
WORKERS = 3
FLOOR, DECREASE = 2.0, 0.8  # messages/s; the default decrease, said here for the test to read


@pytest.fixture
def receiver(settings):
    """Gmail at 10 messages a second (burst 3) for its first 6 seconds, Outlook unthrottled;
    Django's SMTP backend pointed at it, and the engine's pacing on a short clock."""
    throttle = Throttle({GMAIL}, per_minute=600, burst=3, for_seconds=6.0)
    with ThrottlingReceiver(throttle) as server:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
        settings.EMAIL_USE_TLS, settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = False, "", ""
        settings.EMAIL_TIMEOUT = 10
        settings.SENDER_IDEMPOTENT_TRANSPORT = False  # plain: a resend would be a duplicate
        settings.SENDER_THROTTLE_EVERY = 0.2  # seconds: a deferral's delay, a rate's period
        # The first throttle creates Google's bucket from the rate seen over the last 5 s, which
        # a campaign that started a moment ago has hardly any of: at the default floor (0.2/s)
        # the first token would come after 5 s, and recovery (a share of that rate a period)
        # would take minutes. The floor and the share keep the test to seconds.
        settings.SENDER_THROTTLE_FLOOR = FLOOR
        settings.SENDER_THROTTLE_DECREASE = DECREASE
        settings.SENDER_THROTTLE_RECOVERY = 0.5
        settings.SENDER_BACKOFF_BASE = 0.2  # a transient failure (none expected) retried soon
        yield server


def campaign_to(*domains: str, per_domain: int) -> Campaign:
    """An approved campaign, due now, to ``per_domain`` addresses at each domain (interleaved in
    the queue: the build orders by address). The workers classify and build it."""
    campaign = CampaignFactory()
    segment = SegmentFactory(account=campaign.account)
    Subscriber.objects.bulk_create(
        Subscriber(account=campaign.account, segment=segment, email=f"p{n}@{domain}",
                   email_lower=f"p{n}@{domain}", status="confirmed")
        for n in range(per_domain) for domain in domains)
    approve_campaign(campaign_id=campaign.id)
    return campaign


def test_a_throttling_provider_is_slowed_alone_and_gets_every_message_once(receiver):
    campaign = campaign_to(GMAIL, OTHER, per_domain=PER_DOMAIN)

    concurrently(WORKERS, lambda i: run_worker(worker_id=f"w{i}", batch_size=10, lease=30))

    # every recipient reached once: nothing failed or in doubt, no message accepted twice
    assert statuses(campaign) == {"sent": 2 * PER_DOMAIN}
    rows = Send.objects.filter(campaign=campaign)
    assert receiver.duplicates() == {}
    assert sorted(a.message_id for a in receiver.accepted()) == sorted(
        rows.values_list("provider_message_id", flat=True))
    gmail, other = receiver.accepted([GMAIL]), receiver.accepted([OTHER])
    assert len(gmail) == len(other) == PER_DOMAIN

    # Gmail said "slow down", more than once, and nobody else did
    refused = receiver.throttled()
    assert len(refused) > 1 and {a.domain for a in refused} == {GMAIL}
    # the refused recipients were queued again without an attempt counted: like every other
    # row, each was sent on its first (and only) attempt
    assert set(rows.values_list("attempts", flat=True)) == {1}
    assert set(rows.filter(email_lower__in={a.rcpt for a in refused})
               .values_list("status", flat=True)) == {"sent"}

    # The deferrals slowed Google's bucket, the one all three workers share (created by the
    # first throttle: nobody configured it), and no other provider's
    (bucket,) = RateLimit.objects.filter(destination__isnull=False)
    assert (bucket.destination.name, bucket.account_id, bucket.per_second) == ("google", None, None)
    assert bucket.throttled_to is not None
    changes = list(RateLimitChange.objects.filter(rate_limit=bucket).order_by("id"))
    assert RateLimitChange.objects.count() == len(changes)  # no other bucket changed
    assert changes[0].reason.startswith("throttled: 421 4.7.28")
    throttles = [(before, change) for before, change in pairwise(changes)
                 if change.reason.startswith("throttled: 421 4.7.28")]
    assert throttles, "the receiver's limit was met again after the first throttle"
    # each throttle: x SENDER_THROTTLE_DECREASE, of the rate or of what Gmail was seen taking
    assert all(change.per_second <= max(FLOOR, before.per_second * DECREASE) + 1e-9
               for before, change in throttles)
    assert any(change.reason == "good answers: raised" for change in changes)

    # Outlook was not held back with Gmail: all of its mail was in while most of Gmail's waited
    last_other = max(a.at for a in other)
    assert len([a for a in gmail if a.at <= last_other]) < PER_DOMAIN // 2


def test_a_421_at_rcpt_is_a_throttle_and_the_next_message_goes_over_a_new_connection():
    """smtplib hangs up on a 421: the transport must not send the next message over the dead
    connection (that failure would be counted as the next row's attempt)."""
    recipients = [f"a@{GMAIL}", f"b@{GMAIL}", f"c@{GMAIL}", f"d@{OTHER}"]
    with ThrottlingReceiver(Throttle({GMAIL}, per_minute=1, burst=1)) as server:
        transport = DjangoMailTransport(backend="django.core.mail.backends.smtp.EmailBackend",
                                        host="127.0.0.1", port=server.port, use_tls=False,
                                        timeout=5)
        with transport:
            outcomes = transport.send_bulk([
                Delivery(n, f"job-{n}", EmailMessage("Hi", "Hello", "news@tenant.example", [to],
                                                     headers={"Message-ID": f"<{n}@tenant.example>"}))
                for n, to in enumerate(recipients)])
        assert [o.kind for o in outcomes] == [Outcome.SENT, Outcome.THROTTLED, Outcome.THROTTLED,
                                              Outcome.SENT]
        assert {o.throttle_scope for o in outcomes[1:3]} == {Outcome.DESTINATION}
        assert outcomes[1].error.startswith("421 4.7.28")
        assert [a.rcpt for a in server.accepted()] == [recipients[0], recipients[3]]
        assert len(server.throttled()) == 2
