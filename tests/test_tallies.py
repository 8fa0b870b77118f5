"""The tallies of growth_sends (per campaign, status and minute of sent_at): kept exact by the
triggers through every kind of write, folded without losing or doubling a delta when folders and
writers race, and what the counts of the admin and the monitor read."""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor

from growth.models import Campaign, Send, SendTally, SendTallyDelta
from growth.sending.transports.null import NullTransport
from tests.helpers import concurrently
from tests.scenarios import run_worker, sending_campaign


def execute(sql: str, params=None, *, using: str = "default") -> int:
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def deltas() -> int:
    return SendTallyDelta.objects.count()


@pytest.mark.django_db
def test_a_build_claim_settle_delete_and_truncate_keep_every_tally_exact():
    campaign = sending_campaign(count=40)
    assert Campaign.objects.progress([campaign.pk]) == {campaign.pk: {"queued": 40}}

    Send.objects.claim(worker_id="w", batch_size=15, lease=60)
    execute("UPDATE growth_sends SET status = 'sent', sent_at = now() - interval '3 minutes' "
            "WHERE campaign_id = %s AND id IN (SELECT id FROM growth_sends WHERE status = 'sending' "
            "ORDER BY id LIMIT 5)", [campaign.pk])
    execute("UPDATE growth_sends SET status = 'sent', sent_at = now() "
            "WHERE campaign_id = %s AND status = 'sending'", [campaign.pk])
    execute("UPDATE growth_sends SET status = 'failed' WHERE id IN "
            "(SELECT id FROM growth_sends WHERE campaign_id = %s AND status = 'queued' LIMIT 3)",
            [campaign.pk])
    execute("DELETE FROM growth_sends WHERE id IN "
            "(SELECT id FROM growth_sends WHERE campaign_id = %s AND status = 'queued' LIMIT 2)",
            [campaign.pk])
    assert Campaign.objects.progress([campaign.pk]) == {
        campaign.pk: {"queued": 20, "sent": 15, "failed": 3}}
    assert not SendTally.objects.differences([campaign.pk])  # the minutes too: 5 sent 3 minutes ago, 10 now

    SendTally.objects.fold()
    assert deltas() == 0 and not SendTally.objects.differences([campaign.pk])


@pytest.mark.django_db(transaction=True)  # no deferred foreign-key checks pending: TRUNCATE can run
def test_a_truncate_of_the_sends_empties_the_tallies():
    campaign = sending_campaign(count=10)
    SendTally.objects.fold()
    sending_campaign(count=5)  # a delta not folded
    execute("TRUNCATE growth_sends CASCADE")
    assert Campaign.objects.progress([campaign.pk]) == {}
    assert not SendTally.objects.exists() and deltas() == 0


@pytest.mark.django_db
def test_an_update_that_moves_no_row_between_tallies_appends_nothing():
    campaign = sending_campaign(count=30)
    Send.objects.claim(worker_id="w", batch_size=30, lease=60)
    before = deltas()
    execute("UPDATE growth_sends SET lease_expires_at = now() + interval '5 minutes', "
            "attempts = attempts + 1 WHERE campaign_id = %s", [campaign.pk])
    assert deltas() == before  # a lease renewal of 30 rows: no tally changes
    execute("UPDATE growth_sends SET status = 'sent', sent_at = now() WHERE campaign_id = %s",
            [campaign.pk])
    assert deltas() == before + 2  # 30 rows, one statement: -30 sending, +30 sent (one minute)


@pytest.mark.django_db(transaction=True)
def test_a_fold_left_open_is_skipped_by_another_and_nothing_is_counted_twice():
    campaign = sending_campaign(count=50)
    Send.objects.claim(worker_id="w", batch_size=20, lease=60)
    opened = threading.Event()
    release = threading.Event()

    def slow_fold() -> int:
        with transaction.atomic():
            folded = SendTally.objects.fold()
            opened.set()
            release.wait(30)
            return folded

    thread_result = []
    thread = threading.Thread(target=lambda: (thread_result.append(slow_fold()),
                                              connection.close()))
    thread.start()
    assert opened.wait(30)
    execute("UPDATE growth_sends SET status = 'sent', sent_at = now() "
            "WHERE campaign_id = %s AND status = 'sending'", [campaign.pk])
    assert SendTally.objects.fold() == 2  # only the deltas the open fold has not taken
    assert not SendTally.objects.differences([campaign.pk])  # the open fold's deltas still count, once
    release.set()
    thread.join(30)
    assert thread_result and thread_result[0] >= 3  # the build and the claim (2)
    assert deltas() == 0
    assert not SendTally.objects.differences([campaign.pk])
    assert Campaign.objects.progress([campaign.pk]) == {campaign.pk: {"queued": 30, "sent": 20}}


@pytest.mark.django_db(transaction=True)
def test_writers_racing_on_the_same_rows_and_folders_keep_the_tallies_exact():
    """Four writers flip statuses of the same 200 rows (each waits on the others' row locks;
    transactions of up to three statements), two folders fold all along: every tally equals its
    rows at the end, and no deadlock. The writers take rows in one order (ids ascending, the
    j-th statement of a transaction within the j-th third of the ids), so any deadlock here
    would be the tallies' doing."""
    campaign = sending_campaign(count=210)
    ids = sorted(Send.objects.filter(campaign=campaign).values_list("id", flat=True))
    thirds = [ids[:70], ids[70:140], ids[140:]]
    statuses = [s.value for s in Send.Status if s != Send.Status.SENDING]
    writers = 4
    writing = threading.Semaphore(0)

    def write(chance: random.Random) -> int:
        statements = 0
        for _ in range(100):
            with transaction.atomic():
                for third in thirds[:chance.randint(1, 3)]:
                    status = chance.choice(statuses)
                    execute("UPDATE growth_sends SET status = %(status)s, sent_at = CASE WHEN "
                            "%(status)s = 'sent' THEN now() - %(ago)s * interval '1 minute' END "
                            "WHERE id IN (SELECT id FROM growth_sends WHERE id = ANY(%(ids)s) "
                            "ORDER BY id FOR UPDATE)",
                            {"status": status, "ago": chance.randint(0, 3),
                             "ids": chance.sample(third, chance.randint(1, 20))})
                    statements += 1
        return statements

    def fold() -> int:
        folds = 0
        while not writing.acquire(blocking=False):
            SendTally.objects.fold(limit=50)
            folds += 1
        writing.release()  # for the other folder
        return folds

    def work(i: int) -> int:
        if i >= writers:
            return fold()
        try:
            return write(random.Random(i))
        finally:
            if i == 0:
                writing.release()  # the first writer done: the folders may stop

    done = concurrently(writers + 2, work)
    assert all(done), done
    assert not SendTally.objects.differences([campaign.pk])
    SendTally.objects.fold(limit=1_000_000)
    assert deltas() == 0 and not SendTally.objects.differences([campaign.pk])


@pytest.mark.django_db(transaction=True)
def test_two_workers_sending_one_campaign_leave_tallies_equal_to_the_rows_and_folded():
    campaign = sending_campaign(count=600)

    concurrently(2, lambda i: run_worker(transport=NullTransport(), worker_id=f"w{i}",
                                         batch_size=25))
    assert Campaign.objects.progress([campaign.pk]) == {campaign.pk: {"sent": 600}}
    assert not SendTally.objects.differences([campaign.pk])
    # 24 batches, each claimed and settled (and handed over): the workers' housekeeping folds
    # deltas on the way, and each worker what is left as it stops
    assert SendTally.objects.filter(campaign_id=campaign.pk).exists()
    assert deltas() == 0


@pytest.mark.django_db(transaction=True)
def test_a_worker_folds_what_it_leaves_as_it_stops():
    campaign = sending_campaign(count=30)
    run_worker(transport=NullTransport(), worker_id="w", batch_size=10, once=True)  # one cycle
    assert Campaign.objects.progress([campaign.pk]) == {campaign.pk: {"sent": 10, "queued": 20}}
    assert deltas() == 0 and not SendTally.objects.differences([campaign.pk])


@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_sends_that_were_there_before_it():
    campaign = sending_campaign(count=25)
    Send.objects.claim(worker_id="w", batch_size=10, lease=60)
    execute("UPDATE growth_sends SET status = 'sent', sent_at = now() WHERE status = 'sending'")
    executor = MigrationExecutor(connection)
    executor.migrate([("growth", "0014_claim_by_campaign_only")])
    try:
        execute("UPDATE growth_sends SET status = 'failed' WHERE id IN "
                "(SELECT id FROM growth_sends WHERE status = 'queued' LIMIT 4)")  # no trigger now
        executor = MigrationExecutor(connection)
        executor.migrate([("growth", "0015_send_tallies")])
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert Campaign.objects.progress([campaign.pk]) == {
        campaign.pk: {"queued": 11, "sent": 10, "failed": 4}}
    assert not SendTally.objects.differences([campaign.pk])


@pytest.mark.django_db(transaction=True)  # ALTER TABLE ... TRIGGER, as a bypass would leave it
def test_check_tallies_finds_a_drift_and_repair_recounts_it(capsys):
    from django.core.management import CommandError, call_command

    from tests.factories import AccountFactory

    campaign = sending_campaign(count=12)
    untouched = sending_campaign(count=3, account=AccountFactory())
    call_command("check_tallies")
    assert "agree" in capsys.readouterr().out
    execute("ALTER TABLE growth_sends DISABLE TRIGGER growth_sends_tally_update")
    try:  # writes the tallies never saw
        execute("UPDATE growth_sends SET status = 'sent', sent_at = now() WHERE id IN "
                "(SELECT id FROM growth_sends WHERE campaign_id = %s ORDER BY id LIMIT 5)",
                [campaign.pk])
    finally:
        execute("ALTER TABLE growth_sends ENABLE TRIGGER growth_sends_tally_update")

    with pytest.raises(CommandError, match=rf"1 campaign\(s\) disagree: \[{campaign.pk}\]"):
        call_command("check_tallies")
    out = capsys.readouterr().out
    assert f"campaign {campaign.pk}, queued, not sent: tallied 12, rows 7" in out
    assert f"campaign {campaign.pk}, sent, sent " in out and "tallied 0, rows 5" in out
    call_command("check_tallies", str(untouched.pk))  # another campaign's tallies are fine
    call_command("check_tallies", "--repair")
    assert "Recounted 1 campaign(s)" in capsys.readouterr().out
    assert Campaign.objects.progress([campaign.pk]) == {campaign.pk: {"queued": 7, "sent": 5}}
    assert not SendTally.objects.differences(None)


@pytest.mark.django_db
def test_every_count_reaches_a_campaigns_tallies_by_index_never_summing_every_campaign():
    """With other campaigns' history in the tallies (20 campaigns x 1,000 minutes), each reader
    probes the key of the campaigns it counts: a join to the view would sum all of them first."""
    from growth.managers.campaigns import QUERIES as CAMPAIGNS
    from growth.managers.queries import split_settings
    from growth.managers.reputation import QUERIES as REPUTATION

    campaign = sending_campaign(count=20)
    execute("INSERT INTO growth_send_tallies (campaign_id, status, sent_minute, sends) "
            "SELECT 1000000 + c, 'sent', date_trunc('minute', now()) - m * interval '1 minute', 7 "
            "FROM generate_series(1, 20) c, generate_series(1, 1000) m")
    execute("ANALYZE growth_send_tallies")
    readers = {"progress": (CAMPAIGNS, {"campaign_ids": [campaign.pk]}),
               "metrics": (CAMPAIGNS, {"campaign_ids": None}),
               "needing_review": (CAMPAIGNS, {"account_ids": [campaign.account_id]}),
               "rates": (REPUTATION, {"account_ids": [campaign.account_id], "days": 7})}
    for name, (queries, params) in readers.items():
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + split_settings(queries[name])[1], params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "on send_tally_key" in plan or "using send_tally_key" in plan, (name, plan)
        assert "Seq Scan on growth_send_tallies" not in plan, (name, plan)
