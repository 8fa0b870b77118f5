"""Pacing: per-destination shares in the claim, adaptive throttling of the shared buckets, the
warm-up quota and the sending window (growth.sending.pacer, limits.sql, claim_paced)."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.utils import timezone

from growth.managers.limits import RateLimitManager, ThrottlePolicy
from growth.models import (
    Account,
    Campaign,
    Destination,
    RateLimit,
    RateLimitChange,
    Send,
    SendCursor,
    Subscriber,
)
from growth.sending.pacer import Pacer
from growth.sending.transports import BaseTransport, Outcome
from tests.factories import CampaignFactory, SegmentFactory
from tests.helpers import concurrently
from tests.scenarios import sending_campaign, statuses

POLICY = ThrottlePolicy(decrease=0.5, every=0.0, floor=0.5, recovery=0.1, burst=10)


def campaign_to(domains: dict[str, int], **kwargs) -> Campaign:
    """A started, built campaign with ``n`` recipients at each domain, whose rows' ids follow
    the order given (the build numbers addresses alphabetically: the local parts see to it)."""
    from growth.audience.destinations import classify_recipient_domains
    from growth.operations.campaigns import approve_campaign

    campaign = CampaignFactory(**kwargs)
    segment = SegmentFactory(account=campaign.account)
    Subscriber.objects.bulk_create(
        Subscriber(account=campaign.account, segment=segment, email=f"{order}{n:03}@{domain}",
                   email_lower=f"{order}{n:03}@{domain}", status="confirmed")
        for order, (domain, count) in zip("abcdefgh", domains.items(), strict=False)
        for n in range(count))
    approve_campaign(campaign_id=campaign.id)
    Campaign.objects.start_due()
    classify_recipient_domains(campaign_id=campaign.id)
    Send.objects.build_recipients(campaign_id=campaign.id)
    campaign.refresh_from_db()
    return campaign


def destination(name: str) -> Destination:
    return Destination.objects.get_or_create(name=name)[0]


def limit(name: str, **fields) -> RateLimit:
    return RateLimit.objects.create(destination=destination(name), **fields)


def sending(campaign: Campaign):
    (found,) = [c for c in Campaign.objects.sending() if c.campaign_id == campaign.id]
    return found


def claim(campaign: Campaign, *, batch: int = 10, worker: str = "w"):
    return Pacer(batch_size=batch, policy=POLICY).claim(sending(campaign), worker_id=worker,
                                                         lease=60, hand_over=True)


def domains_of(rows) -> list[str]:
    return sorted(row.email.split("@")[1] for row in rows)


@pytest.mark.django_db
def test_the_build_gives_each_recipient_its_provider():
    campaign = campaign_to({"gmail.com": 2, "hotmail.fr": 1, "example.com": 1})
    by_address = dict(Send.objects.filter(campaign=campaign).values_list("email_lower",
                                                                          "destination_id"))
    assert by_address["a000@gmail.com"] == by_address["a001@gmail.com"] == destination("google").id
    assert by_address["b000@hotmail.fr"] == destination("microsoft").id
    assert by_address["c000@example.com"] == destination("example.com").id  # unresolved: its own


@pytest.mark.django_db
def test_a_paced_provider_gets_its_tokens_worth_and_the_others_the_rest():
    campaign = campaign_to({"gmail.com": 8, "example.com": 8})
    limit("google", per_second=0.01, burst=3, tokens=3)
    rows = claim(campaign, batch=10).rows
    assert domains_of(rows) == ["example.com"] * 7 + ["gmail.com"] * 3
    assert RateLimit.objects.get(destination__name="google").tokens == pytest.approx(0, abs=0.01)
    # no tokens left for Google: its rows are passed over, none is leased
    rows = claim(campaign, batch=10).rows
    assert domains_of(rows) == ["example.com"]
    assert statuses(campaign) == {"queued": 5, "sending": 11}
    assert not Send.objects.filter(status="sending", email_lower__endswith="gmail.com",
                                   id__gt=max(r.id for r in rows)).exists()


@pytest.mark.django_db
def test_unused_destination_tokens_are_given_back():
    campaign = campaign_to({"example.com": 4})
    limit("google", per_second=0.01, burst=5, tokens=5)  # a paced provider this campaign lacks
    assert len(claim(campaign, batch=10).rows) == 4
    assert RateLimit.objects.get(destination__name="google").tokens == pytest.approx(5, abs=0.01)


@pytest.mark.django_db
@pytest.mark.parametrize("leases", [False, True])
def test_tokens_of_a_provider_trimmed_from_the_batch_are_given_back_once(leases):
    """Two paced providers granted 4 each for a batch of 4: one gets its 4, the other none, and
    what it was granted goes back to its bucket once: it has its 10 again, not 14."""
    campaign = campaign_to({"gmail.com": 5, "outlook.com": 5})
    if leases:
        SendCursor.objects.create(campaign=campaign)  # built for the lease protocol
    for name in ("google", "microsoft"):
        limit(name, per_second=0.001, burst=20, tokens=10)
    rows = claim(campaign, batch=4).rows
    if leases:  # the first walk past the cursor set every row aside (all are paced): due now
        assert rows == []
        rows = claim(campaign, batch=4).rows
    assert len(rows) == 4
    tokens = sorted(r.tokens for r in RateLimit.objects.filter(destination__isnull=False))
    assert tokens == [pytest.approx(6, abs=0.1), pytest.approx(10, abs=0.1)]


@pytest.mark.django_db
def test_a_provider_with_a_cap_on_messages_on_the_wire_gets_only_the_room_left():
    campaign = campaign_to({"gmail.com": 6})
    limit("google", max_in_flight=4)
    assert len(claim(campaign, worker="a").rows) == 4
    assert claim(campaign, worker="b").rows == []  # four on the wire already
    Send.objects.filter(id=Send.objects.filter(status="sending").order_by("id")[0].id).update(
        status="sent", lease_expires_at=None)
    assert len(claim(campaign, worker="b").rows) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_two_workers_claiming_at_once_hold_a_providers_cap_on_messages_on_the_wire_together(
        monkeypatch, leases):
    """Two workers (threads, each on its own connection): the second takes its tokens while the
    first has taken its own but not yet claimed. It must see the first's rows on the wire."""
    campaign = campaign_to({"gmail.com": 20})
    limit("google", max_in_flight=4)
    if leases:
        SendCursor.objects.create(campaign=campaign)
        # the first walk past the cursor sets the paced rows aside, due at once, and takes none
        assert claim(campaign, worker="walker").rows == []
    first_has_taken = threading.Event()
    original = RateLimitManager.take_destinations

    def take_destinations(self, **kwargs):
        granted = original(self, **kwargs)
        if threading.current_thread().name == "first":
            first_has_taken.set()
            time.sleep(0.5)  # the second worker's turn, before this one claims
        return granted

    monkeypatch.setattr(RateLimitManager, "take_destinations", take_destinations)

    def worker(i: int) -> int:
        threading.current_thread().name = name = ("first", "second")[i]
        if name == "second":
            assert first_has_taken.wait(10)
        return len(claim(campaign, worker=name).rows)

    claimed = concurrently(2, worker)
    assert sum(claimed) == 4, f"on the wire at once: {claimed}"


@pytest.mark.django_db
def test_a_tenants_own_limit_to_a_provider_binds_only_that_tenant():
    mine = campaign_to({"gmail.com": 5})
    theirs = campaign_to({"gmail.com": 5})
    RateLimit.objects.create(destination=destination("google"), account=mine.account,
                             per_second=0.01, burst=2, tokens=2)
    assert len(claim(mine).rows) == 2
    assert len(claim(theirs).rows) == 5


@pytest.mark.django_db
def test_the_paced_window_moves_past_a_wall_of_waiting_rows():
    """Rows of an exhausted provider at the front of the queue: each claim reads at most
    SCAN_BATCHES batches of them, and the next one goes on from there, until it reaches the
    free rows behind them."""
    campaign = campaign_to({"gmail.com": 30, "example.com": 3})
    limit("google", per_second=0.01, burst=1, tokens=0)
    pacer = Pacer(batch_size=2, policy=POLICY)  # reads 8 rows a claim
    claims = [pacer.claim(sending(campaign), worker_id="w", lease=60, hand_over=True).rows
              for _ in range(5)]
    assert [domains_of(rows) for rows in claims[:3]] == [[], [], []]  # 24 Google rows passed
    assert domains_of(claims[3]) == ["example.com", "example.com"]
    assert domains_of(claims[4]) == ["example.com"]
    assert statuses(campaign) == {"queued": 30, "sending": 3}


@pytest.mark.django_db
def test_a_throttle_lowers_the_providers_shared_rate_once_per_round_trip_and_good_answers_raise_it():
    google = Destination.objects.create(name="google")
    bucket = RateLimit.objects.create(destination=google, per_second=10, burst=10, tokens=10)
    throttle = dict(destination_id=google.id, reason="throttled: 421 4.7.28", accepted=0,
                    policy=POLICY)
    assert RateLimit.objects.throttled(sent_since=5, **throttle) == 5.0
    # answers to messages sent before that decrease say nothing new
    assert RateLimit.objects.throttled(sent_since=60, **throttle) is None
    bucket.refresh_from_db()
    assert (bucket.throttled_to, bucket.throttled_from, bucket.tokens) == (5.0, 10.0, 0)
    RateLimit.objects.filter(id=bucket.id).update(
        throttled_at=timezone.now() - dt.timedelta(seconds=10))
    assert RateLimit.objects.throttled(sent_since=5, **throttle) == 2.5  # half of 5
    bucket.refresh_from_db()
    assert bucket.throttled_from == 5.0
    # below the rate it was taking at the last throttle (5/s), + 0.1 x 5 a period; past it,
    # probing: + 20 % a period; past the configured 10/s: no longer throttled
    for expected in (3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.2, 8.64, None):
        RateLimit.objects.filter(id=bucket.id).update(
            adjusted_at=timezone.now() - dt.timedelta(seconds=1))
        assert RateLimit.objects.recover(destination_ids=[google.id], transport="x",
                                         policy=POLICY) == [bucket.id]
        bucket.refresh_from_db()
        assert bucket.throttled_to == (pytest.approx(expected) if expected else None)
    changes = list(RateLimitChange.objects.filter(rate_limit=bucket).order_by("id")
                   .values_list("per_second", "reason"))
    assert changes[:2] == [(5.0, "throttled: 421 4.7.28"), (2.5, "throttled: 421 4.7.28")]
    assert changes[-1] == (10.0, "recovered: back to the configured rate")


@pytest.mark.django_db
def test_a_throttle_of_a_bucket_without_a_rate_judges_by_what_the_receiver_was_seen_accepting():
    google = Destination.objects.create(name="google")
    bucket = RateLimit.objects.create(destination=google, max_in_flight=10)  # no rate of its own
    assert RateLimit.objects.throttled(destination_id=google.id, reason="throttled", accepted=12,
                                       sent_since=1, policy=POLICY) == 6.0
    bucket.refresh_from_db()
    assert bucket.throttled_from == 12.0


@pytest.mark.django_db
def test_a_throttle_from_an_unpaced_provider_creates_its_bucket_at_the_rate_seen():
    google = Destination.objects.create(name="google")
    rate = RateLimit.objects.throttled(destination_id=google.id, reason="throttled", accepted=40,
                                       sent_since=1, policy=POLICY)
    assert rate == 20.0
    bucket = RateLimit.objects.get(destination=google)
    assert bucket.per_second is None and bucket.throttled_from == 40
    assert RateLimit.objects.throttled(destination_id=google.id, reason="throttled", accepted=0,
                                       sent_since=1, policy=POLICY) is None  # same round trip


@pytest.mark.django_db
def test_an_accounts_limit_with_the_esp_slows_the_transport_not_a_provider():
    rate = RateLimit.objects.throttled(transport="esp", reason="throttled: 429", accepted=100,
                                       sent_since=1, policy=POLICY)
    assert rate == 50.0
    bucket = RateLimit.objects.get(transport="esp")
    assert bucket.destination_id is None and bucket.account_id is None
    assert RateLimit.objects.transport_bucket("esp") == bucket.id


@pytest.mark.django_db
def test_the_pacer_attributes_a_throttle_to_the_rows_provider(settings):
    campaign = campaign_to({"gmail.com": 2, "example.com": 2})
    rows = claim(campaign).rows
    gmail = [r for r in rows if r.email.endswith("gmail.com")]
    outcomes = [Outcome(r.id, Outcome.THROTTLED, error="421 4.7.28 rate",
                        throttle_scope=Outcome.DESTINATION) for r in gmail]
    outcomes += [Outcome(r.id, Outcome.SENT) for r in rows if r not in gmail]
    Pacer(batch_size=10, policy=POLICY).observe({r.id: r.destination_id for r in rows}, outcomes,
                                                sent_since=1)
    (bucket,) = RateLimit.objects.all()
    assert bucket.destination == destination("google") and bucket.throttled_to == POLICY.floor
    assert RateLimitChange.objects.get().reason == "throttled: 421 4.7.28 rate"


@pytest.mark.django_db
def test_a_warmup_quota_caps_the_tenants_day_and_refills_at_its_midnight():
    campaign = campaign_to({"example.com": 12})
    account = campaign.account
    account.warmup_started_on = timezone.now().date()
    account.warmup_daily_start, account.warmup_until = 5, 1000
    account.save()
    assert len(claim(campaign).rows) == 5  # day 0 of the schedule: 5 messages
    first = claim(campaign)
    assert first.rows == [] and 0 < first.wait <= 86400  # until midnight in its zone
    quota = RateLimit.objects.get(account=account, per_day__isnull=False)
    assert quota.per_day == 5
    RateLimit.objects.filter(id=quota.id).update(
        refilled_at=timezone.now() - dt.timedelta(days=1))  # the tenant's day has turned
    assert len(claim(campaign).rows) == 5


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["deleted", "begun again"])
def test_a_warmup_quota_whose_bucket_went_still_caps_a_worker_that_knew_it(how):
    """A worker remembers the quota's bucket while the day's cap stands; a take from a bucket
    that was gone granted everything, and the tenant went uncapped for the rest of the day."""
    campaign = campaign_to({"example.com": 30})
    Account.objects.filter(id=campaign.account_id).update(
        warmup_started_on=timezone.now().date(), warmup_daily_start=5, warmup_until=1000)
    pacer = Pacer(batch_size=10, policy=POLICY)
    assert len(pacer.claim(sending(campaign), worker_id="w", lease=60, hand_over=True).rows) == 5
    quota = RateLimit.objects.get(account=campaign.account_id, per_day__isnull=False)
    if how == "deleted":
        quota.delete()  # a fresh quota: a day's tokens again
        expected = 5
    else:  # another worker saw the warm-up end, then a new one begin: spent, under a new id
        RateLimit.objects.warmup(account_id=campaign.account_id, per_day=None)
        RateLimit.objects.warmup(account_id=campaign.account_id, per_day=5)
        RateLimit.objects.filter(account=campaign.account_id, per_day=5).update(tokens=0)
        expected = 0
    again = pacer.claim(sending(campaign), worker_id="w", lease=60, hand_over=True)
    assert len(again.rows) == expected


@pytest.mark.django_db
def test_a_warmup_that_has_grown_past_its_end_caps_nothing():
    campaign = campaign_to({"example.com": 12})
    account = campaign.account
    account.warmup_started_on = timezone.now().date() - dt.timedelta(days=30)
    account.warmup_daily_start, account.warmup_daily_growth, account.warmup_until = 5, 2.0, 1000
    account.save()
    assert len(claim(campaign, batch=20).rows) == 12
    assert not RateLimit.objects.filter(account=account).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("growth", "days"), [(10.0, 400), (1e200, 3), (1.5, 4000)])
def test_a_warmup_grown_past_what_a_float_holds_caps_nothing_and_stops_no_campaign(growth, days):
    """growth ** days raised OverflowError: every page of the tenant answered 500 and the
    worker paused its sending campaigns with that error as the reason."""
    campaign = campaign_to({"example.com": 12})
    Account.objects.filter(id=campaign.account_id).update(
        warmup_started_on=timezone.now().date() - dt.timedelta(days=days), warmup_daily_start=5,
        warmup_daily_growth=growth, warmup_until=1000)
    assert len(claim(campaign, batch=20).rows) == 12


@pytest.mark.django_db
def test_a_campaign_outside_its_sending_window_is_not_claimed_until_it_opens():
    campaign = campaign_to({"example.com": 3})
    now = timezone.now().astimezone(dt.UTC)
    opens = (now + dt.timedelta(hours=2)).time().replace(microsecond=0)
    closes = (now + dt.timedelta(hours=4)).time().replace(microsecond=0)
    Campaign.objects.filter(id=campaign.id).update(window_starts=opens, window_ends=closes)
    closed = claim(campaign)
    # the wait is counted from the transaction's now(), a few ms before the `now` above; opens
    # is that `now` less its microseconds: anything within a second of 2 h
    assert closed.rows == [] and 2 * 3600 - 60 <= closed.wait <= 2 * 3600 + 1
    Campaign.objects.filter(id=campaign.id).update(
        window_starts=(now - dt.timedelta(hours=1)).time(), window_ends=opens)
    assert len(claim(campaign).rows) == 3


class SlowRelay(BaseTransport):
    """A relay that takes a while over every chunk: a batch outlasts what is left of the window.
    It notes when each chunk reached it."""

    waits_on_a_wire = False

    def __init__(self, seconds: float, *, idempotent: bool) -> None:
        self.seconds = seconds
        self.idempotent = idempotent
        self.chunks_started: list[dt.datetime] = []

    def send_bulk(self, deliveries):
        self.chunks_started.append(timezone.now())
        time.sleep(self.seconds)
        return [Outcome(d.send_id, Outcome.SENT) for d in deliveries]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_batch_stops_at_the_end_of_its_sending_window(leases, idempotent, settings):
    """The claim only saw the window open: the chunks no wire took when it closes go back,
    queued with no attempt counted and not in doubt, and nothing reaches the relay after it."""
    from growth.sending.worker import Worker

    settings.SENDER_HANDOFF_CHUNK = 2
    campaign = sending_campaign(20, leases=leases)
    now = timezone.now().astimezone(dt.UTC)
    ends = now + dt.timedelta(seconds=3)
    Account.objects.filter(id=campaign.account_id).update(time_zone="UTC")
    Campaign.objects.filter(id=campaign.id).update(
        window_starts=(now - dt.timedelta(hours=1)).time(), window_ends=ends.time())
    relay = SlowRelay(0.5, idempotent=idempotent)
    Worker(worker_id="w", transport=relay, batch_size=20, once=True).run()

    rows = Send.objects.filter(campaign=campaign)
    sent = rows.filter(status="sent")
    assert 0 < sent.count() < 20
    assert relay.chunks_started and all(started < ends for started in relay.chunks_started)
    assert set(rows.exclude(status="sent").values_list("status", "attempts", "handed_over_at")) \
        == {("queued", 0, None)}


@pytest.mark.django_db
def test_a_time_zone_that_is_none_does_not_stop_the_worker():
    """The account's form refuses it; a row written otherwise is read as UTC."""
    from growth.models import Account
    from growth.sending.transports.null import NullTransport
    from growth.sending.worker import Worker

    campaign = campaign_to({"example.com": 3})
    Account.objects.filter(id=campaign.account_id).update(
        time_zone="Mars/Olympus'; DROP TABLE x;--", warmup_started_on=timezone.now().date(),
        warmup_daily_start=2, warmup_until=1000)
    Campaign.objects.filter(id=campaign.id).update(window_starts=dt.time(0, 0),
                                                   window_ends=dt.time(23, 59, 59))
    Worker(worker_id="w", transport=NullTransport(), batch_size=10).cycle()
    assert statuses(campaign) == {"sent": 2, "queued": 1}  # the warm-up's 2 a day, by UTC
    campaign.refresh_from_db()
    assert campaign.status == "sending" and not campaign.pause_reason


@pytest.mark.django_db
def test_a_claim_starts_after_the_workers_last_batch_and_goes_back_for_rows_queued_behind_it():
    campaign = sending_campaign(count=12)
    ids = list(Send.objects.filter(campaign=campaign).order_by("id").values_list("id", flat=True))
    pacer = Pacer(batch_size=5, policy=POLICY)

    def claim_ids() -> list[int]:
        return [row.id for row in pacer.claim(sending(campaign), worker_id="w", lease=60,
                                              hand_over=True).rows]

    assert claim_ids() == ids[:5]
    # the second row is queued again (a retry now due), behind the worker's hand
    Send.objects.filter(id=ids[1]).update(status="queued", next_attempt_at=None)
    assert claim_ids() == ids[5:10]  # after the hand, although an earlier row is due
    assert claim_ids() == [ids[1], ids[10], ids[11]]  # the rest, then back to the front for it
    assert claim_ids() == []


@pytest.mark.django_db(transaction=True)
def test_good_answers_raise_throttled_buckets_in_the_order_a_take_locks_them():
    """A take holds a tenant's destination buckets, locked in id order, until its claim commits;
    the raise after good answers takes them in the same order, so the two queue, not deadlock.
    (In the order its scan met them, the raise held the later bucket while it waited for the
    first, which the take held while it waited for the later: PostgreSQL aborted one of them.)"""
    from django.db import connection, transaction

    first, later = (limit(name, per_second=10, burst=10, throttled_to=1.0, throttled_from=10.0)
                    for name in ("google", "microsoft"))
    # the later bucket's row ahead of the first's in the table: the scan's order is not the id's
    RateLimit.objects.filter(id=first.id).update(throttled_to=2.0)
    RateLimit.objects.filter(id__in=[first.id, later.id]).update(
        adjusted_at=timezone.now() - dt.timedelta(seconds=10))
    take_holds_first, raise_waits = threading.Event(), threading.Event()
    raiser_pid: list[int] = []

    def take(_: int) -> None:  # a take's lock order: the first bucket, then the later one
        with transaction.atomic():
            RateLimit.objects.select_for_update().filter(id=first.id).get()
            take_holds_first.set()
            assert raise_waits.wait(10)
            RateLimit.objects.select_for_update().filter(id=later.id).get()

    def raise_rates(_: int) -> list[int]:
        assert take_holds_first.wait(10)
        connection.ensure_connection()
        raiser_pid.append(connection.connection.info.backend_pid)
        return RateLimit.objects.recover(destination_ids=[first.destination_id,
                                                          later.destination_id],
                                         transport="x", policy=POLICY)

    def watch(_: int) -> None:  # tells the take once the raise is waiting for a lock
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not raise_waits.is_set():
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = ANY(%s)",
                               [raiser_pid])
                if cursor.fetchone()[0]:
                    raise_waits.set()
            time.sleep(0.02)

    results = concurrently(3, lambda i: (take, raise_rates, watch)[i](i))
    assert sorted(results[1]) == sorted([first.id, later.id])
