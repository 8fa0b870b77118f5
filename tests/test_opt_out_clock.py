"""A tenant's opt-out clock (growth.models.OptOutClock, migration 0022) and the look before the
wire that trusts it (Send.objects.blocked; sends.sql, opt_outs_moved): it ticks in the
transaction of every write that may block a send row, whoever writes it, and only then; while
it has not ticked since a claim looked at its rows, that look stands and no row is read again."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from growth.managers.leases import Lease
from growth.models import OptOutClock, Send, SendLease, Subscriber, Suppression
from tests.factories import AccountFactory, SegmentFactory, SubscriberFactory
from tests.helpers import on_its_own_connection
from tests.scenarios import sending_campaign

pytestmark = pytest.mark.django_db(transaction=True)


def _ticks(account_id: int) -> int:
    clock = OptOutClock.objects.filter(account_id=account_id).first()
    return clock.ticks if clock else 0


def _sql(sql: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_every_write_that_may_block_a_send_ticks_its_tenants_clock_and_no_other():
    account, other = AccountFactory(), AccountFactory()
    subscriber = SubscriberFactory(account=account, segment=SegmentFactory(account=account),
                                   status=Subscriber.Status.CONFIRMED)
    writes = [
        lambda: Suppression.objects.suppress(account_id=account.id, email_lower="a@example.com",
                                             reason="unsubscribed"),
        lambda: Suppression.objects.suppress_many(account_id=account.id, reason="imported",
                                                  emails_lower=["b@example.com", "c@example.com"]),
        lambda: _sql("INSERT INTO growth_suppressions (account_id, email_lower, reason, created_at)"
                     " VALUES (%s, 'd@example.com', 'manual', now())", [account.id]),
        lambda: _sql("UPDATE growth_suppressions SET email_lower = 'e@example.com'"
                     " WHERE email_lower = 'd@example.com'"),
        lambda: Subscriber.objects.filter(id=subscriber.id).update(status="unsubscribed"),
    ]
    for n, write in enumerate(writes, start=1):
        write()
        assert (_ticks(account.id), _ticks(other.id)) == (n, 0)


def test_a_write_that_cannot_block_a_send_leaves_the_clock_alone():
    account = AccountFactory()
    segment = SegmentFactory(account=account)
    pending = SubscriberFactory(account=account, segment=segment, status="pending")
    confirmed = SubscriberFactory(account=account, segment=segment, status="confirmed")
    gone = SubscriberFactory(account=account, segment=segment, status="unsubscribed")
    Suppression.objects.suppress(account_id=account.id, email_lower="a@example.com",
                                 reason="manual")
    before = _ticks(account.id)
    Subscriber.objects.filter(id=pending.id).update(status="confirmed")  # mails more, not less
    Subscriber.objects.filter(id=confirmed.id).update(email="New@example.com")
    Subscriber.objects.filter(id=gone.id).update(status="pending")  # was not mailable already
    Suppression.objects.filter(account=account).delete()
    Suppression.objects.suppress(account_id=account.id, email_lower="b@example.com",
                                 reason="manual")  # the one tick of this test
    Suppression.objects.suppress(account_id=account.id, email_lower="b@example.com",
                                 reason="manual")  # already suppressed: no row written
    assert _ticks(account.id) == before + 1


def test_a_tick_rolled_back_with_its_opt_out_never_happened():
    account = AccountFactory()
    with pytest.raises(RuntimeError), transaction.atomic():
        Suppression.objects.suppress(account_id=account.id, email_lower="a@example.com",
                                     reason="manual")
        raise RuntimeError
    assert _ticks(account.id) == 0


def test_an_opt_out_waits_for_no_other_open_transaction_of_its_tenant():
    """The tick is taken at the commit: a tenant's long import holds its clock row for no more
    than its commit, and the unsubscribe page's opt-out meanwhile goes through."""
    account = AccountFactory()
    imported, release = threading.Event(), threading.Event()

    def long_import() -> None:
        with transaction.atomic():
            Suppression.objects.suppress_many(account_id=account.id, reason="imported",
                                              emails_lower=["slow@example.com"])
            imported.set()
            release.wait(30)

    importer = on_its_own_connection(long_import)
    assert imported.wait(10)
    click = on_its_own_connection(lambda: Suppression.objects.suppress(
        account_id=account.id, email_lower="quick@example.com", reason="unsubscribed"))
    click.join(5)
    went_through = not click.is_alive()
    release.set()
    importer.join()
    click.join()
    assert went_through
    assert _ticks(account.id) == 2


def _claimed(count: int) -> tuple[int, Lease]:
    campaign = sending_campaign(count=count, leases=True)
    (lease,) = SendLease.objects.claim(worker_id="w", campaign_id=campaign.id, batch_size=count,
                                       lease=60, hand_over=True)
    return campaign.account_id, lease


def _looked_again(lease: Lease) -> list[int]:
    return Send.objects.blocked([row.id for row in lease.rows],
                                campaign_id=lease.rows[0].campaign_id, seen=lease.opt_outs)


def test_the_look_before_the_wire_finds_an_opt_out_committed_since_the_claim():
    account_id, lease = _claimed(3)
    assert lease.opt_outs == _ticks(account_id)
    first = lease.rows[0]
    Suppression.objects.suppress(account_id=account_id, reason="unsubscribed",
                                 email_lower=Send.objects.get(id=first.id).email_lower)
    assert _looked_again(lease) == [first.id]


def test_the_look_before_the_wire_reads_no_row_while_the_clock_has_not_moved():
    """Shown by a write the clock cannot see: with triggers off (a replica's apply, a restore),
    the row is blocked, and the look that trusts the clock does not read it. Its own statement,
    without the clock, does."""
    account_id, lease = _claimed(3)
    first = lease.rows[0]
    _sql("SET session_replication_role = replica")
    try:
        Suppression.objects.suppress(account_id=account_id, reason="unsubscribed",
                                     email_lower=Send.objects.get(id=first.id).email_lower)
    finally:
        _sql("SET session_replication_role = DEFAULT")
    assert _looked_again(lease) == []
    assert Send.objects.blocked([row.id for row in lease.rows]) == [first.id]


def test_a_claim_returns_its_own_tenants_clock():
    account_id, _ = _claimed(1)
    Suppression.objects.suppress(account_id=account_id, email_lower="x@example.com",
                                 reason="manual")
    campaign = sending_campaign(count=2, leases=True)
    assert campaign.account_id != account_id
    for n in (1, 2):
        Suppression.objects.suppress(account_id=campaign.account_id,
                                     email_lower=f"{n}@example.com", reason="manual")
    (lease,) = SendLease.objects.claim(worker_id="w", campaign_id=campaign.id, batch_size=2,
                                       lease=60, hand_over=True)
    assert lease.opt_outs == _ticks(campaign.account_id) == 2
