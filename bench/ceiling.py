"""The ceiling: what PostgreSQL itself allows for the engine's state machine on these tables.

Each worker process runs the engine's own statements from ``growth/managers/sends.sql``, verbatim
and with the same parameters, in a bare psycopg loop: ``claim`` (queued -> sending, SKIP LOCKED)
then ``settle`` (sending -> sent, set-based), until a claim comes back empty. Each statement is
its own transaction (autocommit): one round trip each. No rendering, no Django, no ORM.

Two variants, both measured: ``ceiling`` is claim + settle, as the issue defines it; the
``+hand_over`` variant adds the engine's hand_over statement once per batch, which is what the
engine does with an idempotent transport (the null one): its chunk is the whole batch.
"""

from __future__ import annotations

from pathlib import Path

from bench.procs import timed_pool
from growth.managers.sends import NEVER_FORGOTTEN

SENDS_SQL = Path(__file__).resolve().parent.parent / "growth" / "managers" / "sends.sql"
LEASE = 300.0  # seconds, the engine's default
# the engine's defaults: SENDER_RETRY_FOR (48 h), SENDER_THROTTLE_EVERY, SENDER_BACKOFF_*
RETRY_FOR, THROTTLE_DELAY, BACKOFF_BASE, BACKOFF_MAX = 48 * 3600.0, 1.0, 30.0, 3600.0


def work(index: int, ready, conninfo: str, batch_size: int, hand_over: bool) -> int:
    """One worker: claim, (hand over,) settle until nothing is left; return rows settled."""
    import psycopg
    from psycopg.rows import dict_row

    from growth.managers.queries import load

    queries = load(SENDS_SQL)
    worker_id = f"ceiling-{index}"
    # ClientCursor: parameters bound the way Django's psycopg backend binds them.
    with psycopg.connect(conninfo, autocommit=True, cursor_factory=psycopg.ClientCursor,
                         row_factory=dict_row) as conn:
        # the engine claims campaign by campaign: so does the ceiling (the bench's one)
        campaign_id = conn.execute(
            "SELECT id FROM growth_campaigns WHERE status = 'sending'").fetchone()["id"]
        claim = {"worker_id": worker_id, "batch_size": batch_size, "lease": LEASE,
                 "campaign_id": campaign_id, "hand_over": False, **NEVER_FORGOTTEN, "after": 0}
        ready()
        settled = 0
        while True:
            rows = conn.execute(queries["claim"], claim).fetchall()
            if not rows and claim["after"]:
                claim["after"] = 0  # a new lap, from the front, as the engine's Pacer does
                continue
            if not rows:
                return settled
            claim["after"] = max(row["id"] for row in rows)
            ids = [row["id"] for row in rows if row["status"] == "sending"]
            attempts = {row["id"]: row["attempts"] for row in rows}
            leases = sorted({row["leased_until"] for row in rows if row["leased_until"]})
            if hand_over:
                ids = [row["id"] for row in conn.execute(
                    queries["hand_over"], {"ids": ids, "worker_id": worker_id, "leases": leases}
                    ).fetchall()
                    if row["status"] == "sending"]
            cursor = conn.execute(queries["settle"], {
                "ids": ids, "attempts": [attempts[i] for i in ids], "campaign_id": campaign_id,
                "outcomes": ["sent"] * len(ids), "provider_ids": ["null"] * len(ids),
                "errors": [""] * len(ids), "retry_afters": [None] * len(ids),
                "worker_id": worker_id, "retry_for": RETRY_FOR, "throttle_delay": THROTTLE_DELAY,
                "backoff_base": BACKOFF_BASE, "backoff_max": BACKOFF_MAX})
            while cursor.nextset():  # past the statement's SET LOCALs
                pass
            settled += len(cursor.fetchall())


def run(*, audience, batch_size: int, workers: int, hand_over: bool) -> float:
    """Seconds for ``workers`` processes to settle the whole audience."""
    from bench import data

    campaign_id = data.built_and_paused(audience)
    data.resume(campaign_id)
    return run_built(audience=audience, batch_size=batch_size, workers=workers, hand_over=hand_over)


def run_built(*, audience, batch_size: int, workers: int, hand_over: bool) -> float:
    """Seconds to settle the audience's campaign, already built and resumed."""
    from bench import data

    result = timed_pool(workers, work, data.conninfo(), batch_size, hand_over)
    settled = sum(result.results)
    assert settled == audience.size, f"ceiling settled {settled} of {audience.size}"
    return result.seconds
