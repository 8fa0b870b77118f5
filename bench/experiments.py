"""What the recommended changes would buy, measured on the bench database without touching the
engine: ``python -m bench --only experiments`` (opt-in; not part of the default run).

``indexes``     the ceiling (claim + hand_over + settle, the engine's statements) and the engine
                with all of growth_sends's indexes, then with only the primary key and the
                claim's partial indexes: what the other indexes (uniqueness, progress, recovery,
                feedback lookups) cost together; the indexes are put back afterwards.
``reported``    the engine as migrated (0017-0018: the tally function groups by the reported
                flags, two partial indexes on them) and as before (0015's tally function, the
                two indexes dropped), in turn A B B A ..., so that a drift of the machine falls
                on both; everything is put back afterwards. The flags' columns stay: dropping
                them would be another schema than the engine's.
``hot``         the engine as migrated and with a HOT settle (shape h of
                docs/one-write-per-recipient.md, on the engine itself): every index of
                growth_sends that reads a column the lease settle writes (status, sent_at,
                updated_at, last_error, provider_message_id) dropped, the claim's two walks on
                full indexes instead of partial ones on status, the table at fillfactor 30 (a
                settle's new version fits on its page), in turn A B B A ... at each worker count;
                everything is put back afterwards. An upper bound of what moving the state
                indexes off growth_sends buys: the readers those indexes serve (the admin's
                filters, the reputation figures, feedback's look-ups) are not rebuilt elsewhere.
"""

from __future__ import annotations

import importlib
import re
import statistics

from django.db import connection

from bench import ceiling, data, engine, hotspots, procs

KEPT = ["growth_sends_pkey", "send_queued", "send_queued_by_campaign"]  # what the claim needs


def indexes(*, audience, batch_size: int, repetitions: int, out) -> dict[str, dict[str, float]]:
    """{variant: {contender: median recipients/s}} with all indexes and with the claim's only."""
    with connection.cursor() as cursor:  # (name, how to drop it, how to put it back)
        cursor.execute("""
            SELECT i.indexname,
                   coalesce('ALTER TABLE growth_sends DROP CONSTRAINT "' || c.conname || '"',
                            'DROP INDEX "' || i.indexname || '"'),
                   coalesce('ALTER TABLE growth_sends ADD CONSTRAINT "' || c.conname || '" '
                            || pg_get_constraintdef(c.oid), i.indexdef)
              FROM pg_indexes i
              LEFT JOIN pg_constraint c
                ON c.conrelid = 'growth_sends'::regclass AND c.conname = i.indexname
             WHERE i.tablename = 'growth_sends' AND i.indexname <> ALL(%s)""", [KEPT])
        definitions = cursor.fetchall()
    results = {}
    try:
        every = f"all {len(definitions) + len(KEPT)} indexes"
        for variant in (every, "primary key and the claim's indexes only"):
            if variant != every:
                with connection.cursor() as cursor:
                    for _, drop, _ in definitions:
                        cursor.execute(drop)
            runs: dict[str, list[float]] = {"ceiling+hand_over": [], "engine": []}
            for _ in range(repetitions):
                runs["ceiling+hand_over"].append(ceiling.run(audience=audience, batch_size=batch_size,
                                                             workers=1, hand_over=True))
                runs["engine"].append(engine.run(audience=audience, batch_size=batch_size, workers=1,
                                                 out=out, name="experiment"))
            results[variant] = {k: audience.size / statistics.median(v) for k, v in runs.items()}
    finally:
        data.fresh_sends()
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'growth_sends'")
            present = {row[0] for row in cursor.fetchall()}
            for name, _, create in definitions:
                if name not in present:
                    cursor.execute(create)
    return results


REPORTED_INDEXES = ["send_bounced_unsent", "send_complained_unsent"]  # migration 0018


def _tally_function(migration: str, attribute: str) -> str:
    """growth_tally_sends() as ``migration`` writes it, as a CREATE OR REPLACE."""
    text = getattr(importlib.import_module(f"growth.migrations.{migration}"), attribute)
    body = re.search(r"CREATE (?:OR REPLACE )?FUNCTION growth_tally_sends\(\).*?END \$\$;", text,
                     re.DOTALL).group(0)
    return body.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def reported(*, audience, batch_size: int, repetitions: int, out, say=print) -> dict:
    """{"seconds": {variant: [run, ...]}, "ratio": median with ÷ median without}."""
    with_flags = _tally_function("0017_reported_sends", "REPORTED")
    before = _tally_function("0015_send_tallies", "TALLIES")
    indexes = {name: create for name, create in hotspots.indexes() if name in REPORTED_INDEXES}
    assert sorted(indexes) == sorted(REPORTED_INDEXES), f"migration 0018 not applied: {indexes}"
    dropped: set[str] = set()

    def as_migrated() -> None:
        with connection.cursor() as cursor:
            cursor.execute(with_flags)
            for name in sorted(dropped):
                cursor.execute(indexes[name])
        dropped.clear()

    def as_before() -> None:
        with connection.cursor() as cursor:
            cursor.execute(before)
            for name in indexes.keys() - dropped:
                cursor.execute(f"DROP INDEX {name}")
        dropped.update(indexes)

    variants = {"as migrated (0017-0018)": as_migrated, "before (0015's tallies, no 0018)": as_before}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for rep in range(repetitions):
            order = list(variants) if rep % 2 == 0 else list(reversed(variants))
            for name in order:
                variants[name]()
                seconds[name].append(engine.run(audience=audience, batch_size=batch_size, workers=1,
                                                out=out, name="reported"))
                say(f"  reported {rep + 1}: {name}: {seconds[name][-1]:.2f} s")
    finally:
        as_migrated()
        data.fresh_sends()
    medians = [statistics.median(runs) for runs in seconds.values()]
    return {"seconds": seconds, "ratio": medians[0] / medians[1]}


# what the HOT settle keeps: the primary key, the two uniquenesses, and the retry indexes (whose
# condition leaves status out, so that a settle writing no next attempt stays HOT there)
HOT_KEPT = ["growth_sends_pkey", "send_unique_subscriber", "send_unique_address", "send_due",
            "send_due_by_destination"]
# the claim's walks past the cursor, on every row of the campaign instead of its queued ones
HOT_WALKS = [
    "CREATE INDEX hot_walk ON growth_sends (campaign_id, id) INCLUDE (destination_id)",
    "CREATE INDEX hot_walk_by_destination ON growth_sends (campaign_id, destination_id, id)",
]


def hot(*, audience, batch_size: int, workers: list[int], repetitions: int, out, fillfactor: int = 30,
        say=print) -> dict:
    """{workers: {"seconds": {variant: [run, ...]}, "costs": {variant: [write cost, ...]},
    "ratio": median over the rounds of (as migrated's time ÷ the HOT settle's)}}: above 1, the
    HOT settle is faster."""
    dropped = [(name, create) for name, create in hotspots.indexes() if name not in HOT_KEPT]

    def as_migrated() -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE growth_sends CASCADE")  # quick to reindex
            cursor.execute("ALTER TABLE growth_sends RESET (fillfactor)")
            cursor.execute("DROP INDEX IF EXISTS hot_walk, hot_walk_by_destination")
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'growth_sends'")
            present = {row[0] for row in cursor.fetchall()}
            for name, create in dropped:
                if name not in present:
                    cursor.execute(create)

    def hot_settle() -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE growth_sends CASCADE")
            for name, _ in dropped:
                cursor.execute(f'DROP INDEX IF EXISTS "{name}"')
            for create in HOT_WALKS:
                cursor.execute(create.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS"))
            cursor.execute(f"ALTER TABLE growth_sends SET (fillfactor = {int(fillfactor)})")

    variants = {"as migrated": as_migrated, f"HOT settle (fillfactor {fillfactor})": hot_settle}
    results = {}
    try:
        for count in workers:
            seconds: dict[str, list[float]] = {name: [] for name in variants}
            costs: dict[str, list[dict]] = {name: [] for name in variants}
            for rep in range(repetitions):
                order = list(variants) if rep % 2 == 0 else list(reversed(variants))
                for name in order:
                    variants[name]()
                    before = hotspots.activity()
                    with procs.CpuSampler() as sampler:
                        seconds[name].append(engine.run(audience=audience, batch_size=batch_size,
                                                        workers=count, out=out, name="hot"))
                    busy = sampler.busy_between(*engine.last_window)
                    costs[name].append({**hotspots.write_cost(before, audience.size),
                                        "cpu_us": 1e6 * busy / audience.size})
                    say(f"  hot, {count} worker(s), {rep + 1}: {name}: {seconds[name][-1]:.2f} s, "
                        f"{costs[name][-1]['hot_share']:.0%} of updates HOT, "
                        f"{costs[name][-1]['wal_per_recipient']:,.0f} WAL bytes and "
                        f"{costs[name][-1]['cpu_us']:.0f} µs of CPU a recipient")
            ours, theirs = seconds.values()
            ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
            results[count] = {"seconds": seconds, "costs": costs, "ratio": statistics.median(ratios)}
    finally:
        as_migrated()
        data.fresh_sends()
    return results
