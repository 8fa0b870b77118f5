"""What the recommended changes would buy, measured on the bench database without touching the
engine: ``python -m bench --only experiments`` (opt-in; not part of the default run).

``indexes``     the ceiling (claim + hand_over + settle, the engine's statements) and the engine
                with all of growth_sends's indexes, then with only the primary key and the
                claim's partial indexes: what the other indexes (uniqueness, progress, recovery,
                feedback lookups) cost together; the indexes are put back afterwards.
"""

from __future__ import annotations

import statistics

from django.db import connection

from bench import ceiling, data, engine

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
