"""The peers, on the same database, with the same number of jobs: one no-op task per recipient.

procrastinate (the Django-native PostgreSQL job queue) fetches one job per round trip, so it has no
batch size; pgqueuer dequeues in batches (``batch_size``). Both run as separate processes with
async no-op tasks, released together, and are timed from the go to the last worker's exit (each
exits once the queue is empty: procrastinate ``wait=False``, pgqueuer ``mode=drain``). Enqueueing
is not on the clock. Their tables are VACUUM ANALYZEd once the jobs are in, as the engine's and the
minimal ceiling's are once their rows are built. Without it, on a server whose autovacuum is off
(this machine's PostgreSQL 15), pgqueuer ran on a table without statistics: 16,923/s against
19,330/s with one worker, 26,464/s against 29,033/s with two (50,000 jobs, batch 500, three
interleaved pairs, medians).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from django.db import connection

from bench.procs import timed_pool

QUEUE = "bench"
ENQUEUE_CHUNK = 10_000  # jobs per enqueue call
PROCRASTINATE_TABLES = ("procrastinate_jobs", "procrastinate_events", "procrastinate_workers")
PGQUEUER_TABLES = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")


def db_params() -> dict[str, str | None]:
    db = connection.settings_dict
    return {"host": db["HOST"] or None, "port": str(db["PORT"]) if db["PORT"] else None,
            "user": db["USER"] or None, "password": db["PASSWORD"] or None, "dbname": db["NAME"]}


def _conninfo(params: dict) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(**{k: v for k, v in params.items() if v is not None})


# -- procrastinate --------------------------------------------------------------------------------

def _procrastinate_app(params: dict):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=_conninfo(params)))

    @app.task(name="noop", queue=QUEUE)
    async def noop(recipient: int) -> None:
        return None

    return app, noop


def procrastinate_work(index: int, ready, params: dict) -> None:
    app, _ = _procrastinate_app(params)

    async def main() -> None:
        async with app.open_async():
            await app.check_connection_async()
            ready()
            await app.run_worker_async(queues=[QUEUE], wait=False, concurrency=1,
                                       install_signal_handlers=False, name=f"bench-{index}")

    asyncio.run(main())


def procrastinate_run(*, jobs: int, workers: int) -> float:
    params = db_params()
    app, noop = _procrastinate_app(params)

    async def prepare() -> None:
        async with app.open_async():
            if not await _has_table("procrastinate_jobs"):
                await app.schema_manager.apply_schema_async()
            await _truncate(*PROCRASTINATE_TABLES)
            for start in range(0, jobs, ENQUEUE_CHUNK):
                await noop.batch_defer_async(
                    *({"recipient": n} for n in range(start, min(start + ENQUEUE_CHUNK, jobs))))
        await _vacuum_analyze(*PROCRASTINATE_TABLES)

    asyncio.run(prepare())
    result = timed_pool(workers, procrastinate_work, params)
    done = _count("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
    assert done == jobs, f"procrastinate ran {done} of {jobs} jobs"
    return result.seconds


# -- pgqueuer -------------------------------------------------------------------------------------

async def _pgqueuer_connect(params: dict):
    import asyncpg

    return await asyncpg.connect(host=params["host"], port=params["port"], user=params["user"],
                                 password=params["password"], database=params["dbname"])


def pgqueuer_work(index: int, ready, params: dict, batch_size: int) -> None:
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    async def main() -> None:
        manager = QueueManager(Queries(AsyncpgDriver(await _pgqueuer_connect(params))))

        @manager.entrypoint("noop")
        async def noop(job) -> None:
            return None

        ready()
        await manager.run(batch_size=batch_size, mode=QueueExecutionMode.drain,
                          dequeue_timeout=timedelta(seconds=1))

    asyncio.run(main())


def pgqueuer_run(*, jobs: int, workers: int, batch_size: int) -> float:
    from pgqueuer import AsyncpgDriver, Queries

    params = db_params()

    async def prepare() -> None:
        conn = await _pgqueuer_connect(params)
        try:
            queries = Queries(AsyncpgDriver(conn))
            if not await queries.schema_is_installed():
                await queries.install()
            await queries.clear_queue()
            await queries.clear_queue_log()
            await queries.clear_statistics_log()
            for start in range(0, jobs, ENQUEUE_CHUNK):
                size = min(ENQUEUE_CHUNK, jobs - start)
                await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        finally:
            await conn.close()
        await _vacuum_analyze(*PGQUEUER_TABLES)

    asyncio.run(prepare())
    result = timed_pool(workers, pgqueuer_work, params, batch_size)
    left = _count("SELECT count(*) FROM pgqueuer")
    assert left == 0, f"pgqueuer left {left} of {jobs} jobs"
    return result.seconds


# -- helpers (on Django's connection) -------------------------------------------------------------

async def _has_table(name: str) -> bool:
    return bool(await asyncio.to_thread(_count, f"SELECT count(*) FROM pg_tables WHERE tablename = '{name}'"))


async def _truncate(*tables: str) -> None:
    await _execute(f"TRUNCATE {', '.join(tables)} CASCADE")


async def _vacuum_analyze(*tables: str) -> None:
    await _execute(f"VACUUM ANALYZE {', '.join(tables)}")


async def _execute(sql: str) -> None:
    """Run ``sql`` on Django's connection, off the event loop (and close it there, its thread's)."""
    def execute() -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)
        connection.close()

    await asyncio.to_thread(execute)


def _count(sql: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]
