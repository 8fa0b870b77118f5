"""Fewer writes per recipient (issue 17, item 3): the directions, measured on copies of
growth_sends, never on the engine's table: ``python -m bench --only directions`` (opt-in).

Each direction is a table shape with its claim and settle, both the engine's statements with the
same checks, changed only where the shape changes them (``bench/directions.sql``):

  v  as is: a copy of growth_sends (same columns, defaults, checks, indexes; no foreign keys,
     which a claim or settle never checks), the engine's claim and settle verbatim
  a  as v, the settle planned with a hash join (``SET LOCAL enable_nestloop = off`` in its
     query string): from some 100,000 rows on, and on the lease directions' copies at any size,
     the planner joins the batch's rows to the outcomes (``unnest``) in a nested loop whose Join
     Filter pairs 500 × 500 rows (an estimate of 1 row for ``claimed_by = <worker>``, or
     ``lease_id = <lease>``, on statistics where no row has it): ~70–100 ms instead of ~8 per
     batch. Every direction below settles that way too, and claims through (campaign_id, id) by
     a row comparison as sends.sql's claim does, so that they compare table shapes, not plans.
  b  as is without ``send_leased`` (once also without ``send_queued``, an index since replaced
     by ``send_queued_by_campaign``, which the claim needs)
  c  the columns a claim or settle writes (status, attempts, lease, claimed_by, hand-over and
     attempt times, next attempt, sent_at, last error, provider id, updated_at) in a narrow table
     ``dir_state`` (one row per send, keyed by the send's id) with the indexes that read them;
     the wide row (address, subscriber, campaign, job id) written once
  d  a lease per batch: the claim leaves status 'queued' and writes ``lease_id`` (one row of
     ``dir_leases`` per batch) and columns no index reads: HOT, in a table with fillfactor 50
  e  c and d together
  f  e with fillfactor 30: at 50 a claim's row versions do not all fit on their page (the claim
     fills lease_id, handed_over_at, first_attempt_at and claimed_by: each version is larger than
     the one it replaces, and none of the claim's own old versions can be pruned before it
     commits), so some are not HOT
  g  a lease per batch behind a cursor: the claim writes no send row. The campaign's cursor
     (``dir_cursors``, one row, locked by each claim for its few milliseconds) moves past the
     next batch of queued rows and one ``dir_leases`` row names them; the opt-out check is a
     read. The settle ends the lease (a DELETE that only its own worker's lease matches: one
     taken over is no longer ours, and then nothing is written) and writes each row once, with
     the attempt and the hand-over's times the claim did not write. One row version a
     recipient instead of two
  i  the engine's lease protocol (growth/managers/leases.sql, on copies of its tables): g with
     the rest of what the engine's claim has to do, in the same statement under the cursor's
     lock: a free lease (given back, or freed by recovery) taken over whole under a new id; rows
     behind the cursor due again (retries, an operator's requeue, a paced destination's rows set
     aside) through an index of their own; paced destinations' shares. In the timed loop
     nothing is free, due or paced: what those paths cost a batch that takes none of them. Its
     other statements (recovery, release, cancel, requeue) are tested on the same copies
     (tests/test_bench_directions.py, tests/test_lease_protocol_stateful.py)
  h  g where no index reads a row's state (``STATE_INDEXES`` not copied: the primary key and
     the two uniquenesses are left; the claim walks the primary key), fillfactor 30: the
     settle's one row version is HOT. An upper bound for the shape: the sends list's filters,
     recovery, the provider id's lookup and the reputation figures would need another home

Every repetition times each direction as the ceiling is timed (one process per worker, a bare
psycopg loop of claim then settle, one autocommit statement each, committing without waiting for
the flush as the engine does) beside the engine itself (null transport), the engine with
``enable_nestloop`` off for its sessions (libpq's ``PGOPTIONS``: the settle's plan, see a; and
``jit`` off, since before PostgreSQL 18 a disabled nested loop costs 1e10 and is compiled),
pgqueuer and the minimal ceiling (``bench.minimal``), all on the same N and batch. The copy is
refilled from a campaign the engine built before each run, off the clock (the fill's time is
reported: the direction's build cost). Then, once per direction and off the clock, a cost pass
claims and settles the whole copy under EXPLAIN (ANALYZE, WAL, BUFFERS): WAL bytes per recipient
from the statements themselves, so that another database's activity on the server does not
count; row versions and the HOT share from ``pg_stat_user_tables``; which indexes the claim's
plan read, and its buffers at the first, middle and last batch.

"engine, projected" is what the engine would do with a direction if the time its claim and
settle save went straight into the worker's cycle: 1 / (1/engine − 1/v + 1/direction), per worker
count (v: the engine's own statements). Rough: the engine's settle runs on a thread beside the
next claim, and on two cores the workers' Python competes with PostgreSQL.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from django.db import connection

from bench.procs import timed_pool
from growth.managers.queries import split_settings
from growth.managers.sends import NEVER_FORGOTTEN

HERE = Path(__file__).resolve().parent
SENDS_SQL = HERE.parent / "growth" / "managers" / "sends.sql"
LEASES_SQL = SENDS_SQL.with_name("leases.sql")
LEASE = 300.0  # seconds, the engine's default
SETTLE_POLICY = {"retry_for": 48 * 3600.0, "throttle_delay": 1.0, "backoff_base": 30.0,
                 "backoff_max": 3600.0}  # the engine's defaults
NO_FLUSH_WAIT = "SET LOCAL synchronous_commit = off;\n"  # as growth.managers.queries sends it
PLAN_FIX = "SET LOCAL enable_nestloop = off;\n"  # the settle's join: a hash, never 500 by 500
# written by a claim or a settle (or by recovery and follow-ups): dir_state's columns in c and e
HOT_COLUMNS = ["status", "attempts", "lease_expires_at", "handed_over_at", "claimed_by",
               "next_attempt_at", "provider_message_id", "last_error", "sent_at", "updated_at",
               "first_attempt_at"]
# not written by a claim or a settle, but read with the state by partial indexes (the reputation
# figures', migrations 0016-0018; send_queued_doubt_kept, 0029), which the split shapes put on
# dir_state
STATE_FLAGS = ["bounce_reported", "complaint_reported", "in_doubt_since"]
TABLES = ["dir_state", "dir_wide", "dir_sends", "dir_leases", "dir_cursors"]
NO_NESTLOOP = "engine, enable_nestloop off"
ON_LEASES = "engine on leases"  # SENDER_PROTOCOL=leases: its campaign claimed through leases.sql
# i's claim with no destination paced (the bench's campaign has none)
UNPACED = {"paced": [], "share_ids": [], "share_counts": [], "scan": 0}
# every index of growth_sends whose key or condition reads a column a settle writes (status,
# sent_at, the lease, the next attempt, the provider's id, updated_at): with any of them a
# settle's row version cannot be HOT. What is left: the primary key and the two uniquenesses.
STATE_INDEXES = ("send_leased", "send_backoff", "send_queued_by_campaign", "send_campaign_status",
                 "send_queued_by_destination", "send_provider_message_id", "send_hard_refused",
                 "send_bounced_unsent", "send_complained_unsent")


@dataclass(frozen=True, slots=True)
class Direction:
    label: str
    split: bool = False  # the hot columns in dir_state
    lease: bool = False  # a lease per batch
    fillfactor: int = 100  # of the table the claim writes
    without: tuple[str, ...] = ()  # growth_sends indexes not copied
    plan_fix: bool = True  # the settle planned with a hash join (see the module's docstring)
    cursor: bool = False  # a lease per batch behind a cursor: the claim writes no send row
    by_id: bool = False  # with cursor: the claim walks the primary key (no index on status)
    complete: bool = False  # with cursor: take-overs, retries and pacing in the claim (i)

    @property
    def tables(self) -> list[str]:
        return ["dir_wide", "dir_state"] if self.split else ["dir_sends"]

    @property
    def claim_lock(self) -> str | None:
        """The statement sent before its claim, in the same string and transaction (i:
        lock_cursor, so that the claim's snapshot is taken after the cursor's lock)."""
        return "leases.lock_cursor" if self.complete else None

    @property
    def statements(self) -> tuple[str, str]:
        """The names of its (claim, settle) in :func:`statements`."""
        if self.complete:
            return ("leases.claim", "leases.settle")
        if self.cursor:
            return ("claim_cursor_by_id" if self.by_id else "claim_cursor", "settle_cursor")
        if self.split:
            return ("claim_state_lease", "settle_state_lease") if self.lease else ("claim_state",
                                                                                   "settle_state")
        return ("claim_lease", "settle_lease") if self.lease else ("claim", "settle")


DIRECTIONS = {
    "v": Direction("as is, the engine's settle as planned", plan_fix=False),
    "a": Direction("as is"),
    "b": Direction("without send_leased", without=("send_leased",)),
    "c": Direction("hot columns in a narrow table", split=True),
    "d": Direction("a lease per batch, HOT claim (fillfactor 50)", lease=True, fillfactor=50),
    "e": Direction("c + d", split=True, lease=True, fillfactor=50),
    "f": Direction("c + d, fillfactor 30 (room for every claim to be HOT)", split=True, lease=True,
                   fillfactor=30),
    "g": Direction("a lease per batch behind a cursor: one write per recipient", cursor=True),
    "i": Direction("g with take-overs, retries and pacing in its claim", cursor=True,
                   complete=True),
    "h": Direction("g, and no index reads a row's state: a HOT settle (fillfactor 30)",
                   cursor=True, by_id=True, fillfactor=30, without=STATE_INDEXES),
}


def statements() -> dict[str, str]:
    """{name: SQL}: the engine's claim and settle on dir_sends, directions.sql's, and the lease
    protocol's (growth/managers/leases.sql, direction i) on dir_sends, dir_leases and dir_cursors
    as ``leases.<name>``, with the other statements that protocol shares with the row protocol
    (``sends.blocked``, ``sends.retry_unknown``, ``campaigns.cancel`` and its locks, the admin's
    ``workers.held_in_campaign``)."""
    from growth.managers.queries import load

    text = SENDS_SQL.read_text() + "\n" + (HERE / "directions.sql").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        # sends.sql's blocks with directions.sql's, so that these use those fragments as their
        # own; leases.sql beside them, as sends.sql uses one of its blocks
        path = Path(tmp) / "directions.sql"
        path.write_text(text)
        (Path(tmp) / LEASES_SQL.name).write_text(LEASES_SQL.read_text())
        loaded = load(path)
    engine = load(SENDS_SQL)
    campaigns = load(SENDS_SQL.with_name("campaigns.sql"))
    return {"claim": _on_copies(loaded["claim"]), "settle": _on_copies(loaded["settle"]),
            **{f"sends.{name}": _on_copies(engine[name])
               for name in ("blocked", "opt_outs_moved", "retry_unknown")},
            **{f"campaigns.{name}": _on_copies(campaigns[name])
               for name in ("lock_campaign", "lock_cursor", "cancel")},
            "workers.held_in_campaign": _on_copies(
                load(SENDS_SQL.with_name("workers.sql"))["held_in_campaign"]),
            **{f"leases.{name}": _on_copies(sql) for name, sql in load(LEASES_SQL).items()},
            **{name: loaded[name] for name in ("claim_state", "settle_state", "claim_lease",
                                               "settle_lease", "claim_state_lease",
                                               "settle_state_lease", "claim_cursor",
                                               "claim_cursor_by_id", "settle_cursor")}}


def _on_copies(sql: str) -> str:
    """An engine statement on the bench's copies of its tables."""
    for table, copy in (("growth_sends", "dir_sends"), ("growth_send_leases", "dir_leases"),
                        ("growth_send_cursors", "dir_cursors")):
        sql = re.sub(rf"\b{table}\b", copy, sql)
    return sql


# -- the tables -----------------------------------------------------------------------------------

def _columns() -> list[str]:
    """growth_sends's columns a row is inserted with (not the generated job_id)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'growth_sends'::regclass "
                       "AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum")
        return [row[0] for row in cursor.fetchall()]


def _indexes() -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes "
                       "WHERE schemaname = current_schema() AND tablename = 'growth_sends' "
                       "ORDER BY indexname")
        return cursor.fetchall()


def _hot(definition: str) -> bool:
    return any(re.search(rf"\b{column}\b", definition) for column in HOT_COLUMNS)


def _copied(name: str, definition: str, table: str) -> str:
    """growth_sends's index as one of ``table``'s (dir_state: keyed by send_id)."""
    definition = definition.replace(f"INDEX {name} ON", f"INDEX dir_{name} ON", 1)
    definition = re.sub(r" ON (\S+\.)?growth_sends ", f" ON {table} ", definition, count=1)
    if table == "dir_state":
        definition = re.sub(r"\bid\b", "send_id", definition)
    return definition


def create(direction: Direction) -> list[str]:
    """DDL for the direction's (empty) tables and indexes; the indexes come first, as on the
    engine's table, so that the fill pays for them as the build does."""
    drop = f"DROP TABLE IF EXISTS {', '.join(TABLES)} CASCADE"
    # worker_id NULL: a free lease (i), given back or freed by recovery, for a claim to take over
    # the lease protocol's tables as the engine has them (worker_id NULL: a free lease, given
    # back or freed by recovery, for a claim to take over); no foreign keys, as for dir_sends
    ddl = [drop, "CREATE TABLE dir_leases (LIKE growth_send_leases INCLUDING ALL)",
           "CREATE TABLE dir_cursors (LIKE growth_send_cursors INCLUDING ALL)"]
    found = _indexes()
    unknown = set(direction.without) - {name for name, _ in found}
    if unknown:  # a renamed index would be silently kept, and the direction measure nothing
        raise ValueError(f"growth_sends has no index {', '.join(sorted(unknown))}")
    indexes = [(n, d) for n, d in found if n not in direction.without]
    if not direction.split:
        ddl.append("CREATE TABLE dir_sends (LIKE growth_sends INCLUDING ALL EXCLUDING INDEXES) "
                   f"WITH (fillfactor = {direction.fillfactor})")
        ddl += [_copied(n, d, "dir_sends") for n, d in indexes]
    else:
        ddl.append("CREATE TABLE dir_wide (LIKE growth_sends INCLUDING DEFAULTS INCLUDING GENERATED "
                   "INCLUDING IDENTITY)")
        ddl.append("ALTER TABLE dir_wide " + ", ".join(f"DROP COLUMN {c}" for c in HOT_COLUMNS))
        keep = {"id", "campaign_id", "destination_id", *HOT_COLUMNS, *STATE_FLAGS}
        ddl.append("CREATE TABLE dir_state (LIKE growth_sends INCLUDING DEFAULTS INCLUDING "
                   f"CONSTRAINTS) WITH (fillfactor = {direction.fillfactor})")
        ddl.append("ALTER TABLE dir_state " + ", ".join(
            f"DROP COLUMN {c}" for c in [*_columns(), "job_id"] if c not in keep))
        ddl.append("ALTER TABLE dir_state RENAME COLUMN id TO send_id")
        ddl.append("ALTER TABLE dir_state ADD PRIMARY KEY (send_id)")
        ddl += [_copied(n, d, "dir_wide") for n, d in indexes if not _hot(d)]
        ddl += [_copied(n, d, "dir_state") for n, d in indexes if _hot(d)]
        ddl.append("ALTER TABLE dir_state ADD FOREIGN KEY (send_id) REFERENCES dir_wide (id)")
    if direction.lease:
        ddl.append(f"ALTER TABLE {direction.tables[-1]} ADD COLUMN lease_id bigint")
    return ddl


def fill(direction: Direction, campaign_id: int) -> float:
    """Create the direction's tables and copy the campaign's rows in; return the copy's seconds
    (the INSERTs: what the build would pay for the table's shape), then VACUUM ANALYZE."""
    columns = _columns()
    with connection.cursor() as cursor:
        for statement in create(direction):
            cursor.execute(statement)
        started = time.perf_counter()
        if not direction.split:
            listed = ", ".join(columns)
            cursor.execute(f"INSERT INTO dir_sends ({listed}) SELECT {listed} FROM growth_sends "
                           "WHERE campaign_id = %s", [campaign_id])
        else:
            wide = ", ".join(c for c in columns if c not in HOT_COLUMNS)
            state = ", ".join(["campaign_id", "destination_id", *HOT_COLUMNS, *STATE_FLAGS])
            cursor.execute(f"INSERT INTO dir_wide ({wide}) SELECT {wide} FROM growth_sends "
                           "WHERE campaign_id = %s", [campaign_id])
            cursor.execute(f"INSERT INTO dir_state (send_id, {state}) SELECT id, {state} "
                           "FROM growth_sends WHERE campaign_id = %s", [campaign_id])
        cursor.execute("INSERT INTO dir_cursors (campaign_id) VALUES (%s)", [campaign_id])
        seconds = time.perf_counter() - started
        for table in ["dir_leases", "dir_cursors", *direction.tables]:
            cursor.execute(f"VACUUM ANALYZE {table}")
    return seconds


def drop() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {', '.join(TABLES)} CASCADE")


# -- the loop -------------------------------------------------------------------------------------

def _claim_lock(direction: Direction, sql: dict[str, str]) -> str:
    return sql[direction.claim_lock] + ";\n" if direction.claim_lock else ""


def _settle_params(direction: Direction, rows: list[dict], campaign_id: int, worker_id: str) -> dict:
    # the rows under the lease; with a cursor, the settle also writes those the claim found blocked
    settled = rows if direction.cursor else [row for row in rows if row["status"] == "sending"]
    params = {"ids": [row["id"] for row in settled],
              "attempts": [row["attempts"] for row in settled],
              "outcomes": ["sent" if row["status"] == "sending" else "suppressed" for row in settled],
              "provider_ids": ["null"] * len(settled), "errors": [""] * len(settled),
              "retry_afters": [None] * len(settled), "campaign_id": campaign_id,
              "worker_id": worker_id, **SETTLE_POLICY}
    if direction.lease or direction.cursor:
        params["lease_id"] = rows[0]["lease_id"] if rows else None
    if direction.complete:  # the engine's settle: the null transport's receiver de-duplicates
        params["idempotent"] = True
    return params


def work(index: int, ready, conninfo: str, key: str, batch_size: int, campaign_id: int) -> int:
    """One worker: claim, settle (the engine's null-transport path: handed over at the claim)
    until nothing is left; return rows settled."""
    import psycopg
    from psycopg.rows import dict_row

    direction = DIRECTIONS[key]
    claim_name, settle_name = direction.statements
    sql = statements()
    claim = NO_FLUSH_WAIT + _claim_lock(direction, sql) + sql[claim_name]
    settle = NO_FLUSH_WAIT + (PLAN_FIX if direction.plan_fix else "") + sql[settle_name]
    worker_id = f"direction-{key}-{index}"
    params = {"worker_id": worker_id, "batch_size": batch_size, "lease": LEASE,
              "campaign_id": campaign_id, "hand_over": True, **NEVER_FORGOTTEN, "after": 0,
              "chunk_size": batch_size, **UNPACED}
    with psycopg.connect(conninfo, autocommit=True, cursor_factory=psycopg.ClientCursor,
                         row_factory=dict_row) as conn:
        ready()
        settled = 0
        while True:
            cursor = conn.execute(claim, params)
            while cursor.nextset():  # past the SET LOCALs
                pass
            rows = cursor.fetchall()
            if not rows:
                return settled
            cursor = conn.execute(settle, _settle_params(direction, rows, campaign_id, worker_id))
            while cursor.nextset():
                pass
            settled += len(cursor.fetchall())


def timed(key: str, *, campaign_id: int, size: int, batch_size: int, workers: int) -> dict:
    """Fill the copy, then time ``workers`` processes through it: {seconds, fill}."""
    from bench import data

    fill_seconds = fill(DIRECTIONS[key], campaign_id)
    result = timed_pool(workers, work, data.conninfo(), key, batch_size, campaign_id)
    settled = sum(result.results)
    assert settled == size, f"direction {key} settled {settled} of {size}"
    with connection.cursor() as cursor:  # each row claimed once (a claim counts an attempt)
        cursor.execute(f"SELECT count(*) FROM {DIRECTIONS[key].tables[-1]} "
                       "WHERE attempts <> 1 OR status <> 'sent'")
        wrong = cursor.fetchone()[0]
    assert wrong == 0, f"direction {key}: {wrong} rows not claimed exactly once, or not sent"
    return {"seconds": result.seconds, "fill": fill_seconds}


# -- the cost pass --------------------------------------------------------------------------------

def _explained(conn, statement: str, params: dict, prefix: str = "") -> tuple[int, dict]:
    """Run the statement under EXPLAIN (ANALYZE, WAL, BUFFERS), after ``prefix`` (SET LOCALs, or
    a claim's lock_cursor) in the same query string; return the WAL bytes it wrote and its
    plan."""
    from psycopg.rows import tuple_row

    settings, statement = split_settings(statement)
    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(prefix + settings + "EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) "
                       + statement, params)
        while cursor.nextset():
            pass
        (plan,), = cursor.fetchall()
    plan = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    return int(plan.get("WAL Bytes", 0)), plan


def _indexes_read(node: dict, tables: list[str]) -> set[str]:
    """The indexes of ``tables`` a plan scans."""
    own = {node["Index Name"]} if node.get("Relation Name") in tables and "Index Name" in node else set()
    return own.union(*(_indexes_read(child, tables) for child in node.get("Plans", [])))


def _buffers(plan: dict) -> int:
    return plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)


def _checkpoint() -> None:
    """Every cost pass starts right after a checkpoint, so that each logs the same full-page
    images (the first change to a page after a checkpoint writes the whole page to the WAL)."""
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def _table_stats(tables: list[str]) -> tuple[int, int, int]:
    """(row updates, of which HOT, bytes with indexes) summed over the tables."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sum(n_tup_upd), sum(n_tup_hot_upd), "
                       "sum(pg_total_relation_size(relid)) FROM pg_stat_user_tables "
                       "WHERE relname = ANY(%s)", [tables])
        return tuple(int(v or 0) for v in cursor.fetchone())


def cost(key: str, *, campaign_id: int, size: int, batch_size: int) -> dict:
    """One worker claims and settles the whole (fresh) copy, each statement under EXPLAIN
    (ANALYZE, WAL); {WAL bytes, row updates, HOT share per recipient, size before and after}."""
    import psycopg
    from psycopg.rows import dict_row

    from bench import data

    direction = DIRECTIONS[key]
    fill(direction, campaign_id)
    tables = direction.tables
    _, _, bytes_before = _table_stats(tables)
    _checkpoint()
    claim_name, settle_name = direction.statements
    sql = statements()
    worker_id = f"cost-{key}"
    params = {"worker_id": worker_id, "batch_size": batch_size, "lease": LEASE,
              "campaign_id": campaign_id, "hand_over": True, **NEVER_FORGOTTEN, "after": 0,
              "chunk_size": batch_size, **UNPACED}
    state = "dir_state" if direction.split else "dir_sends"
    key_column = "send_id" if direction.split else "id"
    wal = {"claim": 0, "settle": 0}
    done, claims = 0, []
    with psycopg.connect(data.conninfo(), autocommit=True, cursor_factory=psycopg.ClientCursor,
                         row_factory=dict_row) as conn:
        while done < size:
            written, plan = _explained(conn, sql[claim_name], params,
                                       _claim_lock(direction, sql))
            wal["claim"] += written
            claims.append(plan)
            if direction.lease or direction.cursor:  # this claim's lease: its rows
                lease = conn.execute("SELECT id, send_ids FROM dir_leases WHERE worker_id = %s",
                                     [worker_id]).fetchone()
                if lease is None:
                    break
                rows = [{"id": i, "attempts": 1, "status": "sending", "lease_id": lease["id"]}
                        for i in lease["send_ids"]]
            else:
                rows = conn.execute(
                    f"SELECT {key_column} AS id, attempts, status FROM {state} "
                    "WHERE campaign_id = %s AND status = 'sending' AND claimed_by = %s",
                    [campaign_id, worker_id]).fetchall()
                if not rows:
                    break
            wal["settle"] += _explained(conn, sql[settle_name],
                                        _settle_params(direction, rows, campaign_id, worker_id),
                                        PLAN_FIX if direction.plan_fix else "")[0]
            done += len(rows)
    time.sleep(1.0)  # the closed backend's table statistics reach pg_stat_user_tables
    updated, hot, bytes_after = _table_stats(tables)
    assert done == size, f"the cost pass of {key} settled {done} of {size}"
    # the claim's plan, as the planner chose it: which indexes drove it, and whether its reading
    # grew with the rows already sent (a walk of the primary key in id order, say)
    return {"wal_per_recipient": (wal["claim"] + wal["settle"]) / size,
            "wal_claim": wal["claim"] / size, "wal_settle": wal["settle"] / size,
            "updates_per_recipient": updated / size, "hot_share": hot / updated if updated else 0.0,
            "bytes_before": bytes_before, "bytes_after": bytes_after,
            "claim_indexes": sorted(set().union(*(_indexes_read(p, tables) for p in claims))),
            "claim_buffers": [_buffers(claims[0]), _buffers(claims[len(claims) // 2]),
                              _buffers(claims[-2] if len(claims) > 1 else claims[-1])]}


def minimal_cost(*, size: int, batch_size: int) -> dict:
    """The minimal ceiling's writes, measured as :func:`cost` measures a direction's."""
    import psycopg

    from bench import data, minimal

    minimal.prepare(size)
    tables = [minimal.TABLE]
    _, _, bytes_before = _table_stats(tables)
    _checkpoint()
    params = {"campaign_id": minimal.CAMPAIGN, "batch_size": batch_size, "worker_id": "cost",
              "lease": LEASE}
    wal = {"claim": 0, "settle": 0}
    done = 0
    with psycopg.connect(data.conninfo(), autocommit=True,
                         cursor_factory=psycopg.ClientCursor) as conn:
        while done < size:
            wal["claim"] += _explained(conn, minimal.CLAIM, params)[0]
            ids = [row[0] for row in conn.execute(
                f"SELECT id FROM {minimal.TABLE} WHERE status = 'sending' AND claimed_by = 'cost'")]
            if not ids:
                break
            wal["settle"] += _explained(conn, minimal.SETTLE, {"ids": ids, "worker_id": "cost"})[0]
            done += len(ids)
    time.sleep(1.0)
    updated, hot, bytes_after = _table_stats(tables)
    assert done == size, f"the minimal ceiling's cost pass settled {done} of {size}"
    return {"wal_per_recipient": (wal["claim"] + wal["settle"]) / size,
            "wal_claim": wal["claim"] / size, "wal_settle": wal["settle"] / size,
            "updates_per_recipient": updated / size, "hot_share": hot / updated if updated else 0.0,
            "bytes_before": bytes_before, "bytes_after": bytes_after}


# -- the family -----------------------------------------------------------------------------------

def measure(*, audience, batch_size: int, workers: list[int], repetitions: int, out: Path,
            keys: list[str], say) -> dict:
    """{"batch", "size", "directions": {key: label}, "rates": {contender: {workers: [seconds]}},
    "fill": {key: [seconds]}, "costs": {key: figures}, "indexes": [growth_sends's]}."""
    from bench import data, engine, minimal, peers

    size = audience.size
    seconds: dict[str, dict[int, list[float]]] = {}
    fills: dict[str, list[float]] = {key: [] for key in keys}

    def record(name: str, count: int, value: float) -> None:
        seconds.setdefault(name, {}).setdefault(count, []).append(value)
        say(f"  {name:<28} workers {count}  {size / value:>9,.0f} /s")

    try:
        for rep in range(1, repetitions + 1):
            say(f"directions: repetition {rep} of {repetitions}")
            for count in workers:
                record("engine", count, engine.run(audience=audience, batch_size=batch_size,
                                                   workers=count, out=out, name="directions",
                                                   leases=False))
                # the engine on rows unchanged, its sessions planning without nested loops
                # (libpq's PGOPTIONS): what its settle's plan costs it (see v and a)
                record(NO_NESTLOOP, count, engine.run(
                    audience=audience, batch_size=batch_size, workers=count, out=out,
                    name="directions-no-nestloop", leases=False,
                    env={"PGOPTIONS": "-c enable_nestloop=off -c jit=off"}))
                # the engine itself on the lease protocol (its campaign built for it)
                record(ON_LEASES, count, engine.run(
                    audience=audience, batch_size=batch_size, workers=count, out=out,
                    name="directions-leases", leases=True))
                record("pgqueuer", count, peers.pgqueuer_run(jobs=size, workers=count,
                                                             batch_size=batch_size))
                record("minimal ceiling", count, minimal.run(size=size, batch_size=batch_size,
                                                             workers=count))
            campaign_id = data.built_and_paused(audience)  # the copies' source, left queued
            data.resume(campaign_id)
            for key in keys:
                for count in workers:
                    run = timed(key, campaign_id=campaign_id, size=size, batch_size=batch_size,
                                workers=count)
                    record(key, count, run["seconds"])
                    fills[key].append(run["fill"])
        costs = {}
        for key in keys:
            costs[key] = cost(key, campaign_id=campaign_id, size=size, batch_size=batch_size)
            c = costs[key]
            say(f"directions: {key} ({DIRECTIONS[key].label}): {c['wal_per_recipient']:,.0f} WAL "
                f"bytes, {c['updates_per_recipient']:.2f} row updates ({c['hot_share']:.0%} HOT) "
                f"per recipient; {c['bytes_before'] / size:,.0f} → {c['bytes_after'] / size:,.0f} "
                "bytes a row with its indexes")
        costs["minimal ceiling"] = minimal_cost(size=size, batch_size=batch_size)
    finally:
        drop()
        data.fresh_sends()
    return {"batch": batch_size, "size": size,
            "directions": {key: DIRECTIONS[key].label for key in keys},
            "seconds": seconds, "fill": fills, "costs": costs,
            "indexes": [name for name, _ in _indexes()]}


def rate(results: dict, name: str, workers: int) -> float | None:
    """Median recipients/s of a contender (a direction's key, "engine", "pgqueuer", "minimal
    ceiling") at a worker count."""
    runs = results["seconds"].get(name, {}).get(workers) or results["seconds"].get(name, {}).get(
        str(workers))
    return results["size"] / statistics.median(runs) if runs else None
