"""Named SQL blocks, in the manner of procrastinate's ``queries.sql``.

A block starts with a line ``-- name --``; the comment lines right under it describe it; the
statement runs until the next block. Parameters are psycopg's named ``%(param)s``.
"""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"^-- ([a-z_][a-z0-9_]*) --$", re.MULTILINE)


def load(path: Path) -> dict[str, str]:
    """Return {name: statement} for the blocks in ``path``."""
    text = path.read_text()
    names = _HEADER.findall(text)
    if len(names) != len(set(names)):
        raise ValueError(f"{path.name}: a query name is used twice")
    bodies = _HEADER.split(text)[2::2]
    queries = {}
    for name, body in zip(names, bodies, strict=True):
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        statement = "\n".join(lines).strip().rstrip(";")
        if not statement:
            raise ValueError(f"{path.name}: query {name!r} is empty")
        queries[name] = statement
    return queries


def load_beside(module_file: str) -> dict[str, str]:
    """Return the queries of the ``.sql`` file named like the calling module."""
    return load(Path(module_file).with_suffix(".sql"))


# Sent in the same query string as the statement: both run in one implicit transaction, which
# the setting does not outlive (nothing is left on the session, as PgBouncer's transaction mode
# requires).
NO_FLUSH_WAIT = "SET LOCAL synchronous_commit = off;\n"


def fetchall(statement: str, params: dict | None = None, *, wait_for_flush: bool = True) -> list[tuple]:
    """Run one statement on the default connection and return its rows ([] if it has none).

    ``wait_for_flush=False`` commits without waiting for the WAL to reach the disk, for
    statements whose loss in a database crash (not a restart: the last few hundred ms of such
    commits) the engine recovers from. Inside a transaction it has no effect: the setting would
    apply to the caller's whole transaction.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        if wait_for_flush or connection.in_atomic_block:
            cursor.execute(statement, params or {})
        else:
            cursor.execute(NO_FLUSH_WAIT + statement, params or {})
            cursor.nextset()
        return cursor.fetchall() if cursor.description else []
