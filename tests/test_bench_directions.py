"""The bench's one-write table shapes (bench/directions.py: g, h, and i, the engine's lease protocol
on copies of its tables) on the real database: what
their figures rest on. Racing claimers take disjoint leases that cover every row, a settle
writes only its own lease's rows, and the opt-out check at the claim is a read whose finding the
settle writes."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from bench import directions
from growth.managers.sends import NEVER_FORGOTTEN
from growth.models import Suppression
from tests import lease_statements as lease
from tests.helpers import concurrently, fetch_dicts
from tests.scenarios import sending_campaign

ONE_WRITE = ["g", "h", "i"]


def _shape(key: str, campaign_id: int) -> tuple[str, str]:
    """Fill the shape's copy of the campaign; its (claim, settle) SQL, each as the bench sends it
    (i: the claim after its lock_cursor, the settle after its SET LOCAL)."""
    direction = directions.DIRECTIONS[key]
    directions.fill(direction, campaign_id)
    claim, settle = direction.statements
    sql = directions.statements()
    return directions._claim_lock(direction, sql) + sql[claim], sql[settle]


def _claim(cursor, sql: str, *, campaign_id: int, worker_id: str, batch_size: int) -> list[dict]:
    cursor.execute(sql, {"campaign_id": campaign_id, "worker_id": worker_id,
                         "batch_size": batch_size, "chunk_size": batch_size,
                         "lease": directions.LEASE, "hand_over": True, **NEVER_FORGOTTEN, "after": 0,
                         **directions.UNPACED})
    while cursor.nextset():  # past a lock's or a setting's result, to the statement's
        pass
    return fetch_dicts(cursor)


def _settle(cursor, sql: str, key: str, rows: list[dict], *, campaign_id: int,
            worker_id: str) -> dict[int, str]:
    cursor.execute(sql, directions._settle_params(directions.DIRECTIONS[key], rows, campaign_id,
                                                  worker_id))
    while cursor.nextset():
        pass
    return {row["id"]: row["status"] for row in fetch_dicts(cursor)}


def _copy(columns: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM dir_sends ORDER BY id")
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", ONE_WRITE)
def test_racing_claimers_take_disjoint_leases_covering_every_row_each_written_once(
        key, drop_copies):
    campaign = sending_campaign(count=120)
    claim, settle = _shape(key, campaign.id)

    def claim_and_settle_until_empty(i: int) -> list[int]:
        mine = []
        with connection.cursor() as cursor:
            while rows := _claim(cursor, claim, campaign_id=campaign.id, worker_id=f"w{i}",
                                 batch_size=7):
                mine += [row["id"] for row in rows]
                settled = _settle(cursor, settle, key, rows, campaign_id=campaign.id,
                                  worker_id=f"w{i}")
                assert set(settled) == {row["id"] for row in rows}
        return mine

    batches = concurrently(4, claim_and_settle_until_empty)
    claimed = [send_id for batch in batches for send_id in batch]
    assert len(claimed) == len(set(claimed)) == 120
    assert sum(1 for batch in batches if batch) > 1  # the work really was shared
    assert {(status, attempts) for status, attempts in _copy("status, attempts")} == {("sent", 1)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM dir_leases")
        assert cursor.fetchone() == (0,)  # every lease ended with its settle


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", ONE_WRITE)
def test_a_settle_writes_nothing_once_its_lease_was_taken_over(key, drop_copies):
    campaign = sending_campaign(count=5)
    claim, settle = _shape(key, campaign.id)
    with connection.cursor() as cursor:
        rows = _claim(cursor, claim, campaign_id=campaign.id, worker_id="slow", batch_size=5)
        assert len(rows) == 5
        assert _copy("status, attempts") == [("queued", 0)] * 5  # the claim wrote no send row
        cursor.execute("UPDATE dir_leases SET worker_id = 'recovery'")  # another's now

        assert _settle(cursor, settle, key, rows, campaign_id=campaign.id, worker_id="slow") == {}
    assert _copy("status, attempts") == [("queued", 0)] * 5


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", ONE_WRITE)
def test_an_opt_out_found_by_the_claim_is_written_by_the_settle(key, drop_copies):
    campaign = sending_campaign(count=3)
    claim, settle = _shape(key, campaign.id)
    (first_id, first_address), *_ = _copy("id, email_lower")
    Suppression.objects.suppress(account_id=campaign.account_id, email_lower=first_address,
                                 reason="unsubscribed")
    with connection.cursor() as cursor:
        rows = _claim(cursor, claim, campaign_id=campaign.id, worker_id="w", batch_size=3)
        assert {row["id"]: row["status"] for row in rows}[first_id] == "suppressed"
        settled = _settle(cursor, settle, key, rows, campaign_id=campaign.id, worker_id="w")
    assert settled[first_id] == "suppressed"
    assert sorted(settled.values()) == ["sent", "sent", "suppressed"]


# -- i: g's claim with take-overs, retries and pacing --------------------------------------------

PACED, OTHER = 1, 2  # destination ids on the copy (it has no foreign keys)


def _copied_campaign(count: int):
    """A sending campaign of ``count`` rows, and i's copy of it."""
    campaign = sending_campaign(count=count)
    directions.fill(directions.DIRECTIONS["i"], campaign.id)
    return campaign


def _jobs(rows: list[dict]) -> list[tuple[int, str]]:
    """A claim's rows and job ids, in id order."""
    return sorted((row["id"], row["job_id"]) for row in rows)


def _recover(cursor, *, idempotent: bool, max_attempts: int = 5) -> dict:
    return lease.expire_and_recover(cursor, idempotent=idempotent,
                                               max_attempts=max_attempts)


def _leases() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, worker_id, send_ids, takeovers FROM dir_leases ORDER BY id")
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_i_racing_claimers_with_retries_and_a_paced_destination_take_each_row_when_due_once(
        drop_copies):
    campaign = _copied_campaign(150)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE dir_sends SET destination_id = CASE WHEN id %% 3 = 0 THEN %s "
                       "ELSE %s END", [PACED, OTHER])
    ids = [row[0] for row in _copy("id")]
    refused_once = {i for i in ids if i % 5 == 0}  # a transient failure at the first attempt

    def claim_and_settle_until_done(n: int) -> list[list[int]]:
        batches = []
        deadline = time.monotonic() + 30
        with connection.cursor() as cursor:
            while time.monotonic() < deadline:
                rows = lease.claim(cursor, campaign_id=campaign.id, worker_id=f"w{n}", batch_size=7,
                                   shares={PACED: 2})
                if not rows:
                    cursor.execute("SELECT count(*) FROM dir_sends WHERE status = 'queued'")
                    if cursor.fetchone() == (0,):
                        return batches
                    continue  # another worker's rows are on their way back
                batches.append([row["id"] for row in rows])
                outcomes = {row["id"]: "transient" for row in rows
                            if row["id"] in refused_once and row["attempts"] == 1}
                settled = lease.settle(cursor, rows, outcomes, campaign_id=campaign.id,
                                       worker_id=f"w{n}")
                assert set(settled) == {row["id"] for row in rows}
        raise AssertionError("rows are left queued that no claim takes")

    workers = concurrently(4, claim_and_settle_until_done)
    assert sum(1 for batches in workers if batches) > 1  # the work really was shared
    batches = [batch for worker in workers for batch in worker]
    taken = [send_id for batch in batches for send_id in batch]
    assert sorted(taken) == sorted(ids + sorted(refused_once))  # each row once, a refused one twice
    paced_rows = {i for i in ids if i % 3 == 0}
    assert max(len(paced_rows.intersection(batch)) for batch in batches) == 2  # its share, no more
    assert {row for row in _copy("status, attempts, next_attempt_at")} == {
        ("sent", 1, None), ("sent", 2, None)}
    assert _leases() == []


@pytest.mark.django_db(transaction=True)
def test_i_a_paced_destination_without_tokens_is_set_aside_and_taken_as_its_share_allows(
        drop_copies):
    campaign = _copied_campaign(6)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE dir_sends SET destination_id = %s", [PACED])
        assert lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=4,
                           shares={PACED: 0}, scan=4) == []
        assert [row[0] is not None for row in _copy("next_attempt_at")] == [True] * 4 + [False] * 2
        assert _leases() == []  # set aside, not leased

        first = lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=4,
                            shares={PACED: 3}, scan=4)
    assert sorted(row["id"] for row in first) == [row[0] for row in _copy("id")][:3]


@pytest.mark.django_db(transaction=True)
def test_i_an_expired_lease_never_handed_over_is_taken_over_whole_and_its_late_settle_writes_nothing(
        drop_copies):
    campaign = _copied_campaign(5)
    with connection.cursor() as cursor:
        stalled = lease.claim(cursor, campaign_id=campaign.id, worker_id="stalled", batch_size=5,
                              hand_over=False)
        assert _recover(cursor, idempotent=False) == {"freed": 1, "freed_rows": 5, "lost": 0,
                                                      "unknown": 0, "cancelled": 0}
        again = lease.claim(cursor, campaign_id=campaign.id, worker_id="alive", batch_size=5)
        assert sorted(row["id"] for row in again) == sorted(row["id"] for row in stalled)
        assert again[0]["lease_id"] != stalled[0]["lease_id"]  # a take-over is a new claim

        assert lease.settle(cursor, stalled, {}, campaign_id=campaign.id, worker_id="stalled") == {}
        assert _copy("status") == [("queued",)] * 5
        assert set(lease.settle(cursor, again, {}, campaign_id=campaign.id,
                                worker_id="alive").values()) == {"sent"}
    assert _leases() == []


@pytest.mark.django_db(transaction=True)
def test_i_an_expired_lease_handed_to_a_plain_receiver_ends_unknown_until_its_late_settle_says_sent(
        drop_copies):
    campaign = _copied_campaign(3)
    with connection.cursor() as cursor:
        slow = lease.claim(cursor, campaign_id=campaign.id, worker_id="slow", batch_size=3)
        assert _recover(cursor, idempotent=False) == {"freed": 0, "freed_rows": 0, "lost": 1,
                                                      "unknown": 3, "cancelled": 0}
        assert lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=3) == []
        assert _copy("status") == [("unknown",)] * 3
        assert _leases() == []

        first, second, third = sorted(row["id"] for row in slow)
        late = lease.settle(cursor, slow, {second: "transient", third: "permanent"},
                            campaign_id=campaign.id, worker_id="slow")
    assert late == {first: "sent"}  # known now; the others stay for an operator
    assert _copy("status") == [("sent",), ("unknown",), ("unknown",)]


@pytest.mark.django_db(transaction=True)
def test_i_a_lease_handed_to_an_idempotent_receiver_goes_again_until_the_attempt_limit(
        drop_copies):
    campaign = _copied_campaign(2)
    with connection.cursor() as cursor:
        first = lease.claim(cursor, campaign_id=campaign.id, worker_id="dead-1", batch_size=2)
        assert _recover(cursor, idempotent=True, max_attempts=3)["freed"] == 1
        second = lease.claim(cursor, campaign_id=campaign.id, worker_id="dead-2", batch_size=2)
        assert _jobs(second) == _jobs(first)
        assert _leases()[0][3] == 1  # taken over once
        assert _recover(cursor, idempotent=True, max_attempts=3)["freed"] == 1
        lease.claim(cursor, campaign_id=campaign.id, worker_id="dead-3", batch_size=2)
        assert _recover(cursor, idempotent=True, max_attempts=3) == {
            "freed": 0, "freed_rows": 0, "lost": 1, "unknown": 2, "cancelled": 0}
    assert _copy("status") == [("unknown",)] * 2


def _cancel(cursor, campaign_id: int) -> list[int]:
    return lease.cancel(cursor, campaign_id)


@pytest.mark.django_db(transaction=True)
def test_i_a_released_lease_is_taken_over_and_in_a_cancelled_campaign_its_rows_are_cancelled(
        drop_copies):
    campaign = _copied_campaign(4)
    with connection.cursor() as cursor:
        given_back = lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=2,
                                 hand_over=False)
        release = {"campaign_id": campaign.id, "worker_id": "w", "idempotent": False,
                   "unsent": False, "lease_id": given_back[0]["lease_id"]}
        assert lease.run(cursor, "leases.release", **release) == [
            {"freed": 1, "cancelled": 0, "unknown": 0}]
        again = lease.claim(cursor, campaign_id=campaign.id, worker_id="v", batch_size=2,
                            hand_over=False)
        assert _jobs(again) == _jobs(given_back)

        cursor.execute("UPDATE growth_campaigns SET status = 'cancelled' WHERE id = %s",
                       [campaign.id])
        assert lease.run(cursor, "leases.release", **release) == [
            {"freed": 0, "cancelled": 0, "unknown": 0}]  # not w's
        assert lease.run(cursor, "leases.release", **{**release, "worker_id": "v",
                                                "lease_id": again[0]["lease_id"]}) == [
            {"freed": 0, "cancelled": 2, "unknown": 0}]
    assert _copy("status") == [("cancelled",)] * 2 + [("queued",)] * 2
    assert _leases() == []


@pytest.mark.django_db(transaction=True)
def test_i_a_lease_handed_to_a_plain_receiver_is_not_given_back(drop_copies):
    campaign = _copied_campaign(2)
    with connection.cursor() as cursor:
        handed = lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=2)
        assert lease.run(cursor, "leases.release", campaign_id=campaign.id, worker_id="w",
                         idempotent=False, unsent=False, lease_id=handed[0]["lease_id"]) == [
            {"freed": 0, "cancelled": 0, "unknown": 0}]
    assert [row[1] for row in _leases()] == ["w"]  # left to its settle, or to its expiry


@pytest.mark.django_db(transaction=True)
def test_i_cancel_leaves_the_rows_on_the_wire_to_their_settle_and_cancels_every_other_queued_row(
        drop_copies):
    campaign = _copied_campaign(8)
    ids = [row[0] for row in _copy("id")]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE dir_sends SET destination_id = %s WHERE id = %s", [PACED, ids[2]])
        on_the_wire = lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=2,
                                  shares={PACED: 0}, scan=3)  # rows 0 and 1; row 2 set aside
        dead = lease.claim(cursor, campaign_id=campaign.id, worker_id="dead", batch_size=2,
                           shares={PACED: 0}, hand_over=False)
        cursor.execute("UPDATE dir_leases SET worker_id = NULL, expires_at = NULL "
                       "WHERE worker_id = 'dead'")  # freed, as recovery frees it
        assert sorted(row["id"] for row in on_the_wire) == ids[:2]
        assert sorted(row["id"] for row in dead) == ids[3:5]

        # the row set aside, the free lease's rows and the rows never claimed
        assert _cancel(cursor, campaign.id) == ids[2:]
        assert _copy("next_attempt_at") == [(None,)] * 8
        assert lease.claim(cursor, campaign_id=campaign.id, worker_id="x", batch_size=8) == []
        settled = lease.settle(cursor, on_the_wire, {ids[1]: "transient"}, campaign_id=campaign.id,
                               worker_id="w")
    assert settled == {ids[0]: "sent", ids[1]: "cancelled"}
    assert _leases() == []


@pytest.mark.django_db(transaction=True)
def test_i_recovery_in_a_cancelled_campaign_cancels_what_never_went_out(drop_copies):
    campaign = _copied_campaign(4)
    with connection.cursor() as cursor:
        lease.claim(cursor, campaign_id=campaign.id, worker_id="a", batch_size=2, hand_over=False)
        lease.claim(cursor, campaign_id=campaign.id, worker_id="b", batch_size=2)  # handed over
        assert _cancel(cursor, campaign.id) == []  # both on the wire
        assert _recover(cursor, idempotent=True) == {"freed": 0, "freed_rows": 0, "lost": 2,
                                                     "unknown": 2, "cancelled": 2}
    assert _copy("status") == [("cancelled",)] * 2 + [("unknown",)] * 2


@pytest.mark.django_db(transaction=True)
def test_i_an_operators_requeue_is_due_behind_the_cursor_and_the_wire_is_counted_from_the_leases(
        drop_copies):
    campaign = _copied_campaign(3)
    with connection.cursor() as cursor:
        lost = lease.claim(cursor, campaign_id=campaign.id, worker_id="dead", batch_size=2)
        _recover(cursor, idempotent=False)
        assert lease.queued(cursor)
        last = lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=2)
        assert [row["id"] for row in last] == [row[0] for row in _copy("id")][2:]  # one row
        assert [(r["worker_id"], r["rows_held"]) for r in lease.run(
            cursor, "workers.held_in_campaign", campaign_id=campaign.id)] == [("w", 1)]
        lease.settle(cursor, last, {}, campaign_id=campaign.id, worker_id="w")
        assert not lease.queued(cursor)

        requeued = lease.run(cursor, "sends.retry_unknown", ids=[row["id"] for row in lost])
        assert len(requeued) == 2
        assert lease.queued(cursor)
        again = lease.claim(cursor, campaign_id=campaign.id, worker_id="w", batch_size=5)
        assert _jobs(again) == _jobs(lost)
        assert lease.run(cursor, "workers.held_in_campaign", campaign_id=campaign.id)[0]["rows_held"] == 2
