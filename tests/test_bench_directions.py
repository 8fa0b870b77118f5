"""The bench's one-write table shapes (bench/directions.py, g and h) on the real database: what
their figures rest on. Racing claimers take disjoint leases that cover every row, a settle
writes only its own lease's rows, and the opt-out check at the claim is a read whose finding the
settle writes."""

from __future__ import annotations

import pytest
from django.db import connection

from bench import directions
from growth.models import Suppression
from tests.helpers import concurrently
from tests.scenarios import sending_campaign

ONE_WRITE = ["g", "h"]


@pytest.fixture
def drop_copies():
    yield
    directions.drop()


def _shape(key: str, campaign_id: int) -> tuple[str, str]:
    """Fill the shape's copy of the campaign; its (claim, settle) SQL."""
    direction = directions.DIRECTIONS[key]
    directions.fill(direction, campaign_id)
    claim, settle = direction.statements
    sql = directions.statements()
    return sql[claim], sql[settle]


def _rows(cursor) -> list[dict]:
    names = [column.name for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _claim(cursor, sql: str, *, campaign_id: int, worker_id: str, batch_size: int) -> list[dict]:
    cursor.execute(sql, {"campaign_id": campaign_id, "worker_id": worker_id,
                         "batch_size": batch_size, "lease": directions.LEASE, "hand_over": True,
                         "after": 0})
    return _rows(cursor)


def _settle(cursor, sql: str, key: str, rows: list[dict], *, campaign_id: int,
            worker_id: str) -> dict[int, str]:
    cursor.execute(sql, directions._settle_params(directions.DIRECTIONS[key], rows, campaign_id,
                                                  worker_id))
    return {row["id"]: row["status"] for row in _rows(cursor)}


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
