"""Named SQL blocks, in the manner of procrastinate's ``queries.sql``, and the one way managers
run them.

A block starts with a line ``-- name --``; the comment lines right under it describe it; the
statement runs until the next block. Parameters are psycopg's named ``%(param)s``. A block may
use another block of the same file with ``{{ name }}``: a condition written once stands in every
statement that applies it (the text is spliced in at load time, so the planner sees exactly what
a copy would have given it). A block whose name starts with ``_`` is such a fragment only. A
block may begin with ``SET LOCAL`` lines (a planner setting its statement needs): they last until
the statement's commit, never on the session.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.db import connection

_HEADER = re.compile(r"^-- ([a-z_][a-z0-9_]*) --$", re.MULTILINE)
_USE = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
_SET_LOCAL = re.compile(r"\ASET LOCAL [a-z_]+ = [a-z0-9_]+;\n", re.IGNORECASE)

# Sent in the same query string as the statement: both run in one implicit transaction, which
# the setting does not outlive (nothing is left on the session, as PgBouncer's transaction mode
# requires).
NO_FLUSH_WAIT = "SET LOCAL synchronous_commit = off;\n"

Row = dict[str, object]


class FromRow:
    """For the dataclasses managers return: built from a row by column name."""

    __slots__ = ()

    @classmethod
    def from_row(cls, row: Row):
        return cls(**row)


def load(path: Path) -> dict[str, str]:
    """Return {name: statement} for the blocks in ``path``, fragments spliced in."""
    text = path.read_text()
    names = _HEADER.findall(text)
    if len(names) != len(set(names)):
        raise ValueError(f"{path.name}: a query name is used twice")
    bodies = _HEADER.split(text)[2::2]
    blocks = {}
    for name, body in zip(names, bodies, strict=True):
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        statement = "\n".join(lines).strip().rstrip(";")
        if not statement:
            raise ValueError(f"{path.name}: query {name!r} is empty")
        blocks[name] = statement

    def expand(name: str, using: tuple[str, ...] = ()) -> str:
        if name not in blocks:
            raise ValueError(f"{path.name}: {using[-1]!r} uses {name!r}, which is no block")
        if name in using:
            raise ValueError(f"{path.name}: {name!r} uses itself")
        return _USE.sub(lambda used: expand(used[1], (*using, name)), blocks[name])

    return {name: expand(name) for name in blocks if not name.startswith("_")}


class Queries:
    """The statements of one ``.sql`` file, run on the default connection.

    ``rows`` returns each row as a dict keyed by column name, so that callers build their
    dataclasses by name (``Claimed.from_row``), never by position.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.statements = load(path)
        self._settings = {name: _count_settings(statement)
                          for name, statement in self.statements.items()}

    @classmethod
    def beside(cls, module_file: str) -> Queries:
        """The queries of the ``.sql`` file named like the calling module."""
        return cls(Path(module_file).with_suffix(".sql"))

    def __getitem__(self, name: str) -> str:
        return self.statements[name]

    def rows(self, name: str, /, *, wait_for_flush: bool = True, **params) -> list[Row]:
        """Run the statement; return its rows ([] if it returns none).

        ``wait_for_flush=False`` commits without waiting for the WAL to reach the disk, for
        statements whose loss in a database crash (not a restart: the last few hundred ms of
        such commits) the engine recovers from. Inside a transaction it has no effect: the
        setting would apply to the caller's whole transaction.
        """
        with connection.cursor() as cursor:
            settings = self._settings[name]
            if wait_for_flush or connection.in_atomic_block:
                cursor.execute(self.statements[name], params)
            else:
                cursor.execute(NO_FLUSH_WAIT + self.statements[name], params)
                settings += 1
            for _ in range(settings):  # past the SET LOCALs' results, to the statement's
                cursor.nextset()
            if cursor.description is None:
                return []
            columns = [column.name for column in cursor.description]
            return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]

    def together(self, *calls: tuple[str, dict[str, object]]) -> list[list[Row]]:
        """Run several statements in one round trip and one transaction: the string of them is
        one implicit transaction, all committed or none (its commit waits for the disk). Return
        each one's rows. Each is bound on the client (psycopg's ClientCursor, as Django's
        cursors are), so that their parameters' names cannot meet."""
        with connection.cursor() as cursor:
            cursor.execute(";\n".join(cursor.mogrify(self.statements[name], params)
                                       for name, params in calls))
            results = []
            for name, _ in calls:
                for _ in range(self._settings[name]):
                    cursor.nextset()
                columns = [column.name for column in cursor.description or ()]
                results.append([dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
                               if columns else [])
                cursor.nextset()
            return results

    def one(self, name: str, /, **params) -> Row | None:
        """Run the statement; return its first row, or None."""
        found = self.rows(name, **params)
        return found[0] if found else None

    def column(self, name: str, /, **params) -> list:
        """Run the statement; return the first column of every row."""
        return [next(iter(row.values())) for row in self.rows(name, **params)]

    def rowcount(self, name: str, /, **params) -> int:
        """Run a statement that returns no rows; return how many rows it changed."""
        with connection.cursor() as cursor:
            cursor.execute(self.statements[name], params)
            return cursor.rowcount


def split_settings(statement: str) -> tuple[str, str]:
    """(its SET LOCAL lines, the statement itself): for tools that EXPLAIN a statement."""
    rest = statement
    while match := _SET_LOCAL.match(rest):
        rest = rest[match.end():]
    return statement[:len(statement) - len(rest)], rest


def _count_settings(statement: str) -> int:
    """How many SET LOCAL lines the statement begins with (each ends its line)."""
    return split_settings(statement)[0].count("\n")
