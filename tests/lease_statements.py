"""The lease protocol's statements (growth/managers/leases.sql: the next send protocol, a lease
per batch behind a campaign cursor; the bench's direction i) on the bench's copies of its tables,
called as the engine will call them, each on a connection of the test's choosing, for the tests
of them: one owner for how a claim's pacing and a settle's outcomes become parameters."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from bench import directions
from tests.helpers import fetch_dicts


@functools.cache
def statements() -> dict[str, str]:
    """The statements on the copies by name, loaded once: a mutant of
    tests/protocol_mutants.LEASE_MUTANTS patches this very dict."""
    return directions.statements()


def run(cursor, name: str, **params) -> list[dict]:
    """One of bench.directions.statements() (``leases.<name>``: the engine's, on the copies); its
    rows as dicts. A claim is sent after its lock_cursor, a cancel after its locks, in the same
    string and transaction, as the engine sends them."""
    if name == "leases.claim":
        sql = directions._claim_lock(directions.DIRECTIONS["i"], statements()) + statements()[name]
    elif name == "campaigns.cancel":  # after its locks, in the same string and transaction
        sql = ";\n".join(statements()[step] for step in ("campaigns.lock_campaign",
                                                          "campaigns.lock_cursor", name))
    else:
        sql = statements()[name]
    cursor.execute(sql, params)
    while cursor.nextset():  # past the lock's row, to the claim's
        pass
    return fetch_dicts(cursor)


def claim(cursor, *, campaign_id: int, worker_id: str, batch_size: int,
          shares: Mapping[int, int] | None = None, hand_over: bool = True,
          scan: int = 20, chunk_size: int | None = None,
          forgets_after: float | None = None) -> list[dict]:
    """leases.claim. ``shares``: the paced destinations, each with the rows its tokens allow
    now (none: nothing paced); ``scan``: how far past the cursor a claim walks while paced;
    ``chunk_size``: rows a lease (none: the batch in one); ``forgets_after``: the seconds the
    receiver remembers a key (none: for ever)."""
    shares = shares or {}
    return run(cursor, "leases.claim", campaign_id=campaign_id, worker_id=worker_id,
               batch_size=batch_size, lease=directions.LEASE, hand_over=hand_over,
               paced=list(shares), share_ids=list(shares), share_counts=list(shares.values()),
               scan=scan, chunk_size=chunk_size or batch_size, forgets_after=forgets_after)


def settle(cursor, rows: list[dict], outcomes: Mapping[int, str], *, campaign_id: int,
           worker_id: str, idempotent: bool = True, lease_id: int | None = None) -> dict[int, str]:
    """leases.settle of a lease's ``rows`` (of the first row's lease, unless ``lease_id``): each
    row's outcome from ``outcomes``, else 'sent' (or 'suppressed' where the claim found it
    blocked); a transient failure is due again at once. Returns {send id: status} of the rows
    written."""
    params = directions._settle_params(directions.DIRECTIONS["i"], rows, campaign_id, worker_id)
    params["outcomes"] = [outcomes.get(row["id"], outcome)
                          for row, outcome in zip(rows, params["outcomes"], strict=True)]
    params["backoff_base"] = 0.0
    params["idempotent"] = idempotent
    if lease_id is not None:
        params["lease_id"] = lease_id
    return {row["id"]: row["status"] for row in run(cursor, "leases.settle", **params)}


def expire_and_recover(cursor, *, idempotent: bool, max_attempts: int,
                       worker_id: str | None = None) -> dict:
    """Let the live leases (of one worker, or of all) run out, then leases.recover: its counts."""
    cursor.execute("UPDATE dir_leases SET expires_at = now() - interval '1 second' "
                   "WHERE worker_id IS NOT NULL AND (%s::text IS NULL OR worker_id = %s)",
                   [worker_id, worker_id])
    return run(cursor, "leases.recover", idempotent=idempotent, max_attempts=max_attempts,
               limit=100)[0]


def cancel(cursor, campaign_id: int) -> list[int]:
    """The engine's cancel of the campaign, on the copies: the rows it cancelled."""
    cursor.execute("SELECT id FROM dir_sends WHERE status = 'cancelled'")
    before = {row[0] for row in cursor.fetchall()}
    run(cursor, "campaigns.cancel", campaign_id=campaign_id, expected=None)
    cursor.execute("SELECT id FROM dir_sends WHERE status = 'cancelled'")
    return sorted({row[0] for row in cursor.fetchall()} - before)


def queued(cursor) -> bool:
    """Some row of the copy is still to send (a row in flight, in a free lease or due again is
    queued)."""
    cursor.execute("SELECT EXISTS (SELECT 1 FROM dir_sends WHERE status = 'queued')")
    return cursor.fetchone()[0]
