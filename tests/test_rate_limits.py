"""Rate limits: token buckets in PostgreSQL, shared by every worker; campaigns served in turn."""

from __future__ import annotations

import pytest
from django.db.models import Max, Min
from django.utils import timezone

from growth.models import Destination, RateLimit, Send
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests.helpers import concurrently
from tests.scenarios import approved_campaign, sending_campaign, statuses


def bucket(*, per_second: float, burst: float, tokens: float = 0, idle: float = 0, **scope):
    limit = RateLimit.objects.create(per_second=per_second, burst=burst, **scope)
    RateLimit.objects.filter(id=limit.id).update(
        tokens=tokens, refilled_at=timezone.now() - timezone.timedelta(seconds=idle))
    return limit


@pytest.mark.django_db
def test_a_bucket_refills_with_time_up_to_its_burst_and_grants_whole_batches():
    limit = bucket(per_second=10, burst=5, idle=60, transport="t")
    first = RateLimit.objects.take([limit.id], want=20)
    assert first.count == 5  # a minute idle refills only to the burst
    second = RateLimit.objects.take([limit.id], want=20)
    assert second.count == 0 and 0.4 <= second.wait <= 0.6  # 5 tokens at 10/s
    RateLimit.objects.give_back([limit.id], count=3)
    assert RateLimit.objects.take([limit.id], want=3).count == 3
    RateLimit.objects.give_back([limit.id], count=100)
    assert RateLimit.objects.get(id=limit.id).tokens == 5  # never above the burst


@pytest.mark.django_db
def test_a_rate_no_form_accepts_refills_to_its_burst_instead_of_overflowing():
    """Written past the form (a script, an old row): a rate times a quiet spell overflowed
    float8, and every claim that read the bucket failed: every tenant's, for a shared one."""
    limit = bucket(per_second=1e308, burst=5, idle=10, transport="t")
    assert RateLimit.objects.take([limit.id], want=20).count == 5
    google = bucket(per_second=1e308, burst=5, idle=10,
                    destination=Destination.objects.create(name="google"))
    (grant,) = RateLimit.objects.take_destinations(account_id=0, want=20).values()
    assert (grant.granted, grant.bucket_ids) == (5, [google.id])


@pytest.mark.django_db
def test_a_grant_is_the_same_from_every_bucket_and_never_a_nibble():
    tenant = bucket(per_second=100, burst=50, tokens=50, transport="a")
    transport = bucket(per_second=100, burst=50, tokens=7, transport="b")
    assert RateLimit.objects.take([tenant.id, transport.id], want=20).count == 0  # 7 < a batch
    RateLimit.objects.filter(id=transport.id).update(tokens=30)
    assert RateLimit.objects.take([tenant.id, transport.id], want=20).count == 20
    assert sorted(RateLimit.objects.values_list("tokens", flat=True)) == [10, 30]
    assert RateLimit.objects.take([], want=20).count == 20  # no bucket: no limit


@pytest.mark.django_db
def test_a_worker_without_tokens_claims_nothing():
    campaign = sending_campaign(count=10)
    bucket(per_second=0.01, burst=5, account=campaign.account)
    Worker(batch_size=5, transport=NullTransport()).cycle()
    assert statuses(campaign) == {"queued": 10}  # no lease taken that it could not use


@pytest.mark.django_db(transaction=True)
def test_three_workers_together_stay_within_a_tenants_limit():
    per_second, burst, batch = 40.0, 10.0, 5
    campaign = approved_campaign(count=160)
    bucket(per_second=per_second, burst=burst, account=campaign.account)
    concurrently(3, lambda i: Worker(worker_id=f"w{i}", batch_size=batch, tick=0.05,
                                     until_idle=True, transport=NullTransport()).run())
    assert statuses(campaign) == {"sent": 160}
    span = Send.objects.aggregate(first=Min("sent_at"), last=Max("sent_at"))
    seconds = (span["last"] - span["first"]).total_seconds()
    # 160 messages at 40/s from an empty bucket: about 4 s, never faster than the bucket allows
    assert per_second * seconds + burst + batch >= 160
    assert seconds < 10  # and the workers did not idle needlessly either


@pytest.mark.django_db(transaction=True)
def test_a_small_tenant_is_not_starved_by_a_big_one():
    big = approved_campaign(count=400)
    small = approved_campaign(count=60)
    Worker(batch_size=20, tick=0.05, until_idle=True, transport=NullTransport()).run()
    done_small = Send.objects.filter(campaign=small).aggregate(t=Max("sent_at"))["t"]
    big_by_then = Send.objects.filter(campaign=big, sent_at__lte=done_small).count()
    assert big_by_then <= 100  # served in turn, not after the big one's 400


@pytest.mark.django_db(transaction=True)
def test_a_rate_limited_tenant_does_not_hold_back_another():
    slow = approved_campaign(count=40)
    fast = approved_campaign(count=100)
    bucket(per_second=20, burst=10, account=slow.account)
    Worker(batch_size=20, tick=0.05, until_idle=True, transport=NullTransport()).run()
    fast_done = Send.objects.filter(campaign=fast).aggregate(t=Max("sent_at"))["t"]
    slow_span = Send.objects.filter(campaign=slow).aggregate(a=Min("sent_at"), b=Max("sent_at"))
    assert fast_done < slow_span["b"]  # the fast tenant finished while the slow one trickled
    assert (slow_span["b"] - slow_span["a"]).total_seconds() >= (40 - 10 - 20) / 20


@pytest.mark.django_db
def test_the_admin_shows_each_limit_beside_the_rate_sent_now(admin_client, django_assert_max_num_queries):
    campaign = sending_campaign(count=30)
    bucket(per_second=12.5, burst=10, account=campaign.account)
    bucket(per_second=100, burst=50, transport="growth.sending.transports.null.NullTransport")
    Send.objects.filter(campaign=campaign, id__in=Send.objects.values("id")[:20]).update(
        status="sent", sent_at=timezone.now())
    with django_assert_max_num_queries(8):  # one aggregate for the page, not one per row
        page = admin_client.get("/admin/growth/ratelimit/").content.decode()
    assert "12.5" in page and "2.0/s" in page  # 20 sent over the last 10 s
    assert "transport growth.sending.transports.null.NullTransport" in page


@pytest.mark.django_db
def test_the_current_rate_counts_each_tenants_sends_of_the_last_seconds_only():
    ours, theirs, finished = (sending_campaign(count=6) for _ in range(3))
    Worker(batch_size=6, transport=NullTransport()).cycle()  # one of them: 6 sent now
    Worker(batch_size=6, transport=NullTransport()).cycle()
    Worker(batch_size=6, transport=NullTransport()).cycle()
    long_ago = timezone.now() - timezone.timedelta(hours=1)
    Send.objects.filter(campaign=theirs).update(sent_at=long_ago)
    Send.objects.filter(campaign=finished).update(sent_at=long_ago)
    type(finished).objects.filter(id=finished.id).update(status="sent", finished_at=long_ago)
    accounts = [ours.account_id, theirs.account_id, finished.account_id]
    assert statuses(ours) == {"sent": 6}
    assert RateLimit.objects.current_rates(accounts, seconds=10) == {ours.account_id: 0.6}
