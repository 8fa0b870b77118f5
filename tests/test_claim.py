"""Layer 4: claiming batches with FOR UPDATE SKIP LOCKED, suppressions re-checked at claim time."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from growth.managers.leases import QUERIES as LEASE_QUERIES
from growth.managers.queries import split_settings
from growth.managers.sends import NEVER_FORGOTTEN, QUERIES, hand_over_params, settle_params
from growth.models import Campaign, Send, SendLease, Subscriber, Suppression
from growth.sending.transports import Outcome
from tests.helpers import concurrently
from tests.scenarios import sending_campaign, statuses


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_take_disjoint_batches_covering_every_row():
    campaign = sending_campaign(count=600)
    claimers = 8

    def claim_until_empty(i: int) -> list[int]:
        mine = []
        while batch := Send.objects.claim(worker_id=f"w{i}", batch_size=7, lease=60):
            mine += [row.id for row in batch]
        return mine

    batches = concurrently(claimers, claim_until_empty)
    claimed = [send_id for batch in batches for send_id in batch]
    assert len(claimed) == len(set(claimed)) == 600
    assert set(claimed) == set(Send.objects.filter(campaign=campaign).values_list("id", flat=True))
    assert sum(1 for batch in batches if batch) > 1  # the work really was shared
    by_worker = dict(Send.objects.values_list("id", "claimed_by"))
    for i, batch in enumerate(batches):
        assert all(by_worker[send_id] == f"w{i}" for send_id in batch)


@pytest.mark.django_db(transaction=True)
def test_a_claimer_skips_rows_another_holds_without_waiting():
    sending_campaign(count=10)
    locked = threading.Event()
    release = threading.Event()

    def hold_first_five(_):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT id FROM growth_sends ORDER BY id LIMIT 5 FOR UPDATE")
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=lambda: concurrently(1, hold_first_five))
    holder.start()
    locked.wait(10)
    started = time.monotonic()
    batch = Send.objects.claim(worker_id="w", batch_size=10, lease=60)
    waited = time.monotonic() - started
    release.set()
    holder.join()
    assert len(batch) == 5
    assert waited < 5  # it did not wait for the holder's transaction


@pytest.mark.django_db
def test_claim_moves_rows_to_sending_under_a_lease():
    campaign = sending_campaign(count=3)
    batch = Send.objects.claim(worker_id="host:1", batch_size=2, lease=120)
    assert [row.status for row in batch] == ["sending", "sending"]
    assert [row.attempts for row in batch] == [1, 1]
    row = Send.objects.get(id=batch[0].id)
    assert row.claimed_by == "host:1"
    remaining = (row.lease_expires_at - timezone.now()).total_seconds()
    assert 60 < remaining <= 121
    assert statuses(campaign) == {"sending": 2, "queued": 1}


@pytest.mark.django_db
def test_an_opt_out_committed_while_queued_is_suppressed_at_claim_time():
    campaign = sending_campaign(count=4)
    first, second, *_ = Send.objects.filter(campaign=campaign).order_by("id")
    Suppression.objects.suppress(account_id=campaign.account_id, email_lower=first.email_lower,
                                 reason="unsubscribed")
    Subscriber.objects.filter(id=second.subscriber_id).update(status="pending")

    batch = Send.objects.claim(worker_id="w", batch_size=10, lease=60)
    by_id = {row.id: row.status for row in batch}
    assert by_id[first.id] == "suppressed"
    assert by_id[second.id] == "suppressed"
    assert sorted(by_id.values()) == ["sending", "sending", "suppressed", "suppressed"]
    first.refresh_from_db()
    assert first.attempts == 0 and first.lease_expires_at is None


@pytest.mark.django_db
def test_paused_campaigns_and_rows_in_backoff_are_not_claimed():
    paused = sending_campaign(count=2)
    Campaign.objects.pause(campaign_id=paused.id)
    waiting = sending_campaign(count=2)
    Send.objects.filter(campaign=waiting).update(
        next_attempt_at=timezone.now() + timezone.timedelta(minutes=5))
    assert Send.objects.claim(worker_id="w", batch_size=10, lease=60) == []
    Campaign.objects.resume(campaign_id=paused.id)
    assert len(Send.objects.claim(worker_id="w", batch_size=10, lease=60)) == 2


@pytest.mark.django_db
@pytest.mark.parametrize("per_campaign", [False, True])
def test_the_claim_walks_an_index_not_the_table(per_campaign):
    campaign = sending_campaign(count=3000)
    sending_campaign(count=3000)
    Send.objects.filter(campaign=campaign, id__lt=Send.objects.order_by("id")[2500].id).update(
        status="sent")  # the usual shape mid-campaign: most rows done
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_sends")
        params = {"worker_id": "w", "batch_size": 20, "lease": 60, "hand_over": False, "after": 0,
                  **NEVER_FORGOTTEN}
        if per_campaign:
            cursor.execute("EXPLAIN " + QUERIES["claim"], {**params, "campaign_id": campaign.id})
        else:
            cursor.execute("EXPLAIN " + QUERIES["claim_any"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on growth_sends" not in plan, plan


@pytest.mark.django_db
@pytest.mark.parametrize("statement", ["claim", "claim_paced"])
def test_a_campaigns_claim_does_not_read_an_older_campaigns_queued_rows(statement):
    """Both campaigns' rows are queued, the older one's first in id order. Filtered from the
    primary key in id order (as the planner chose with `campaign_id = X`), the newer one's claim
    read every row of the older one first."""
    sending_campaign(count=4000)
    newer = sending_campaign(count=4000)
    params = {"worker_id": "w", "lease": 60, "hand_over": False, **NEVER_FORGOTTEN, "campaign_id": newer.id,
              "after": 0}
    if statement == "claim":
        params["batch_size"] = 20
    else:
        params.update(free=20, paced=[0], share_ids=[], share_counts=[], after=0, scan=80)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_sends")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES[statement], params)
        (plan,), = cursor.fetchall()
    assert _rows_read(plan[0]["Plan"], "growth_sends") <= 1000  # 20 claimed, not 4,000 passed


@pytest.mark.django_db(transaction=True)
def test_the_lease_claims_walk_reads_about_its_batch_not_every_queued_row_after_the_cursor():
    """The campaign's rows vacuumed since the build (autovacuum does so after a big insert), so
    that an index-only scan looks cheap, and the walk past the cursor estimated at one row (the
    row comparison is estimated by campaign_id alone). Reading the destination too, the walk
    took send_queued_by_destination, index-only but out of id order, and sorted every queued
    row after the cursor on every claim (at 100,000 recipients: 18 ms a claim at the front,
    against 2). claim_paced's window reads next_attempt_at from the rows: never index-only."""
    campaign = sending_campaign(count=3000, leases=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE growth_sends")
    for _ in range(3):
        SendLease.objects.claim(worker_id="w", campaign_id=campaign.id, batch_size=20, lease=60,
                                hand_over=True)
    params = {"campaign_id": campaign.id, "worker_id": "w", "batch_size": 20, "chunk_size": 20,
              "lease": 60, "hand_over": True, **NEVER_FORGOTTEN,
              "paced": [], "share_ids": [], "share_counts": [],
              "scan": 0}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + LEASE_QUERIES["claim"], params)
        (plan,), = cursor.fetchall()
    walk = _cte(plan[0]["Plan"], "walked")
    assert _rows_read(walk, "growth_sends") <= 40, walk  # 20 walked, not 2,940


@pytest.mark.django_db
def test_the_lease_claim_probes_its_rows_whatever_the_leases_statistics_say():
    """growth_send_leases analyzed while it holds 500-id leases, as autovacuum does during a
    send. PostgreSQL 17 and later then guess unnest()'s rows from those statistics, and the
    claim's rows, joined to its new leases' ids, were guessed at 100,000: the plan hashed every
    queued row of growth_sends on every claim (make bench: 26 ms a claim, the engine at half its
    rate). On older servers the guess stays small and the test holds either way."""
    campaign = sending_campaign(count=5000, leases=True)
    for _ in range(2):
        SendLease.objects.claim(worker_id="w", campaign_id=campaign.id, batch_size=500, lease=60,
                                hand_over=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_send_leases")
        cursor.execute("ANALYZE growth_sends")
    params = {"campaign_id": campaign.id, "worker_id": "w", "batch_size": 500, "chunk_size": 500,
              "lease": 60, "hand_over": True, **NEVER_FORGOTTEN,
              "paced": [], "share_ids": [], "share_counts": [],
              "scan": 0}
    with connection.cursor() as cursor:
        cursor.execute(LEASE_QUERIES["lock_cursor"], {"campaign_id": campaign.id})
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + LEASE_QUERIES["claim"], params)
        (plan,), = cursor.fetchall()
    # the walk's 500 (and the one past it) and a probe for each: not the 5,000 queued rows
    assert _rows_read(plan[0]["Plan"], "growth_sends") <= 1_100


@pytest.mark.django_db
def test_recovery_probes_an_expired_leases_rows_whatever_the_leases_statistics_say():
    """As the claim above: joined to unnest() of the expired leases' ids, the rows recovery
    writes were guessed from the leases' statistics on PostgreSQL 17 and later, and one expired
    500-id lease hashed every row of growth_sends."""
    campaign = sending_campaign(count=5000, leases=True)
    leases = [SendLease.objects.claim(worker_id="dead", campaign_id=campaign.id, batch_size=500,
                                      lease=60, hand_over=True)[0] for _ in range(2)]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_send_leases")
        cursor.execute("ANALYZE growth_sends")
        cursor.execute("UPDATE growth_send_leases SET expires_at = now() - interval '1 second'"
                       " WHERE id = %s", [leases[0].id])
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + LEASE_QUERIES["recover"],
                       {"idempotent": False, "max_attempts": 5, "limit": 1000})
        (plan,), = cursor.fetchall()
    assert statuses(campaign)["unknown"] == 500
    # the lease's 500 rows, found and written: not the 5,000 of the campaign
    assert _rows_read(plan[0]["Plan"], "growth_sends") <= 1_100


@pytest.mark.django_db
@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("statement", ["hand_over", "settle"])
def test_a_wire_statement_reads_its_rows_by_primary_key_whatever_else_is_on_the_wire(
        statement, prepared):
    """The statistics were taken before the send, when no row was on the wire, as they usually
    are. Rows on the wire then looked rare to the planner, which read all of them (every
    worker's) to find a chunk's five: the hand-over through send_leased, and on PostgreSQL 18
    the settle by a skip scan of send_campaign_status; prepared, a generic plan would do so on
    every call."""
    campaign = sending_campaign(count=3000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_sends")
    Send.objects.claim(worker_id="others", batch_size=2500, lease=60, campaign_id=campaign.id)
    chunk = Send.objects.claim(worker_id="w", batch_size=5, lease=60, campaign_id=campaign.id)
    if statement == "hand_over":
        params = hand_over_params(chunk, worker_id="w")
    else:
        Send.objects.hand_over(chunk, worker_id="w")
        params = settle_params([Outcome(row.id, Outcome.SENT) for row in chunk],
                                campaign_id=campaign.id, worker_id="w",
                                attempts={row.id: row.attempts for row in chunk}, retry_for=60,
                                backoff_base=1.0, backoff_max=1.0, throttle_delay=1.0)
    with connection.cursor() as cursor:
        settings, text = split_settings(QUERIES[statement])
        if settings:
            cursor.execute(settings)
        if prepared:
            text = QUERIES.prepare(statement, cursor).execute
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params)
        (plan,), = cursor.fetchall()
    assert _rows_read(plan[0]["Plan"], "growth_sends") <= 20  # 5 twice, not 2,500 passed


@pytest.mark.django_db
@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_a_settle_compiles_nothing_for_jit_on_a_server_that_would(protocol):
    """A settle plans without nested loops (enable_nestloop off). Before PostgreSQL 18 that adds
    1e10 to the cost of every nested loop the plan cannot avoid (the lease settle's rows without
    an outcome join its one-row lease and campaign), which crosses every JIT threshold: on
    PostgreSQL 15 a five-row settle spent 3.5 s compiling (the chaos run on leases, 150 s
    instead of 12). PostgreSQL 18 counts disabled nodes instead, and the embedded server has no
    JIT: this runs where it would (make test-pg)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_jit_available() AND current_setting('jit')::bool")
        if not cursor.fetchone()[0]:
            pytest.skip("this server has no JIT to compile with")
    campaign = sending_campaign(count=10, leases=protocol == "leases")
    if protocol == "leases":
        (lease,) = SendLease.objects.claim(worker_id="w", campaign_id=campaign.id, batch_size=5,
                                           lease=60)
        rows, queries, extra = lease.rows, LEASE_QUERIES, {"lease_id": lease.id,
                                                           "idempotent": False}
    else:
        rows, queries, extra = Send.objects.claim(worker_id="w", batch_size=5, lease=60,
                                                  campaign_id=campaign.id), QUERIES, {}
    # the first row has no outcome: the lease settle's branch for it runs too
    params = settle_params([Outcome(row.id, Outcome.SENT) for row in rows[1:]],
                           campaign_id=campaign.id, worker_id="w",
                           attempts={row.id: row.attempts for row in rows}, retry_for=60,
                           backoff_base=1.0, backoff_max=1.0, throttle_delay=1.0)
    with connection.cursor() as cursor:
        settings, text = split_settings(queries["settle"])
        cursor.execute(settings)
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, {**params, **extra})
        (plan,), = cursor.fetchall()
    assert "JIT" not in plan[0], plan[0]["JIT"]
    assert statuses(campaign)["sent"] == 4  # the settle ran, and ran as planned


def _cte(node: dict, name: str) -> dict | None:
    """The plan of the statement's CTE ``name`` (None: not in this node)."""
    if node.get("Subplan Name") == f"CTE {name}":
        return node
    return next(filter(None, (_cte(child, name) for child in node.get("Plans", []))), None)


def _rows_read(node: dict, table: str) -> int:
    """Rows a plan's scans of ``table`` returned or filtered out, over all its loops."""
    here = 0
    if node.get("Relation Name") == table:
        here = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get(
            "Actual Loops", 1)
    return here + sum(_rows_read(child, table) for child in node.get("Plans", []))


@pytest.mark.django_db
def test_a_claim_of_any_campaign_leaves_the_lease_protocols_alone():
    """A lease campaign's rows on the wire stay queued: the row protocol's claim of every
    campaign would have taken them from under their lease."""
    on_rows, on_leases = sending_campaign(count=3), sending_campaign(count=3, leases=True)
    assert len(SendLease.objects.claim(worker_id="w", campaign_id=on_leases.id, batch_size=2,
                                       lease=60)) == 1
    batch = Send.objects.claim(worker_id="tool", batch_size=10, lease=60)
    assert {row.campaign_id for row in batch} == {on_rows.id} and len(batch) == 3
    assert statuses(on_leases) == {"queued": 1, "sending": 2}  # its lease's, untouched


@pytest.mark.django_db
def test_a_per_campaign_claim_takes_only_that_campaigns_rows():
    first, second = sending_campaign(count=3), sending_campaign(count=3)
    batch = Send.objects.claim(worker_id="w", batch_size=10, lease=60, campaign_id=second.id)
    assert {row.campaign_id for row in batch} == {second.id} and len(batch) == 3
    assert statuses(first) == {"queued": 3}


@pytest.mark.django_db
def test_release_reads_its_rows_by_primary_key_whatever_else_is_on_the_wire():
    """As the wire statements above: the statistics taken while no row was on the wire made the
    planner think the other workers' rows on the wire were few enough to read them all."""
    campaign = sending_campaign(count=3000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_sends")
    Send.objects.claim(worker_id="others", batch_size=2500, lease=60, campaign_id=campaign.id)
    mine = Send.objects.claim(worker_id="w", batch_size=5, lease=60, campaign_id=campaign.id)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES["release"],
                       {"campaign_id": campaign.id, "idempotent": True, "unsent": False,
                        **hand_over_params(mine, worker_id="w")})
        (plan,), = cursor.fetchall()
    assert _rows_read(plan[0]["Plan"], "growth_sends") <= 20  # 5 (twice), not 2,500 passed
