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
"""

from __future__ import annotations

import importlib
import re
import statistics

from django.db import connection

from bench import ceiling, data, engine, hotspots

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
