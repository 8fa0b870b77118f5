"""Named SQL blocks, in the manner of procrastinate's ``queries.sql``, and the one way managers
run them.

A block starts with a line ``-- name --``; the comment lines right under it describe it; the
statement runs until the next block. Parameters are psycopg's named ``%(param)s``. A block may
use another block of the same file with ``{{ name }}``: a condition written once stands in every
statement that applies it (the text is spliced in at load time, so the planner sees exactly what
a copy would have given it); ``{{ sends._blocked }}`` is the block ``_blocked`` of ``sends.sql``
beside it, so that a rule two files apply has one owner. A block whose name starts with ``_`` is
such a fragment only. A block may begin with ``SET LOCAL`` lines (a planner setting its statement
needs): they last until the statement's commit, never on the session.

The statements a worker runs for every chunk on its wires (``together``) can be prepared on the
server once per connection (DATABASE_PREPARED_STATEMENTS): PostgreSQL then stops planning them on
every call, which was half of its CPU for a 5-row settle and hand-over. They are still sent as one
string of client-bound SQL, ``EXECUTE name(literals)``, so that several still go in one round trip
and one implicit transaction. A prepared statement is session state: behind PgBouncer's
transaction pooling (DATABASE_POOL_MODE) the setting is off.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import InterfaceError, InternalError, OperationalError, connection

_HEADER = re.compile(r"^-- ([a-z_][a-z0-9_]*) --$", re.MULTILINE)
_USE = re.compile(r"\{\{\s*([a-z_][a-z0-9_.]*)\s*\}\}")
_SET_LOCAL = re.compile(r"\ASET LOCAL [a-z_]+ = [a-z0-9_]+;\n", re.IGNORECASE)

# Sent in the same query string as the statement: both run in one implicit transaction, which
# the setting does not outlive (nothing is left on the session, as PgBouncer's transaction mode
# requires).
NO_FLUSH_WAIT = "SET LOCAL synchronous_commit = off;\n"
# A prepared statement's plan made once, without its parameters' values: the plans of the
# statements prepared here look their rows up by primary key whatever the values (see the plan
# tests), and PostgreSQL's own choice kept re-planning them on every call.
GENERIC_PLAN = "SET LOCAL plan_cache_mode = force_generic_plan;\n"
_PLACEHOLDER = re.compile(r"%\(([a-z_][a-z0-9_]*)\)s|%%")
# {psycopg connection: names of the statements prepared on it}: a new connection (after a
# reconnect, say) starts with none.
_PREPARED_ON: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

Row = dict[str, object]


def array_literal(values: Iterable[str | int | float | None]) -> str:
    """Return ``values`` as a PostgreSQL array literal (``{1,"a \\"b\\"",NULL}``), for a
    parameter the statement casts to its array type (``%(ids)s::bigint[]``).

    Bound on the client, a list goes through psycopg's dumpers one element at a time: 5 ms of
    the worker's Python for a settle's six arrays of 500, against 0.8 ms for this. Strings are
    always quoted, so no text can end an element or the array; the literal is then quoted as
    any string parameter is.
    """
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif isinstance(value, str):
            parts.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
        elif isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(repr(value))
        else:
            raise TypeError(f"no array literal for a {type(value).__name__}")
    return "{" + ",".join(parts) + "}"


class FromRow:
    """For the dataclasses managers return: built from a row by column name."""

    __slots__ = ()

    @classmethod
    def from_row(cls, row: Row):
        return cls(**row)


# What a worker waits out (reconnecting, with backoff) rather than dies of: the database is
# away (a lost connection, a restart), or cannot take writes now. A standby that a failover's DNS
# or address still points at refuses every write with SQLSTATE 25006, which Django raises as an
# InternalError, as it does a transaction left aborted: a new connection is the cure for both.
DATABASE_AWAY = (OperationalError, InterfaceError, InternalError)


def discard_connection() -> None:
    """Drop this thread's database connection after it failed (DATABASE_AWAY): Django opens a new
    one on next use."""
    try:
        connection.close()
    except Exception:  # already broken
        connection.connection = None


def load(path: Path) -> dict[str, str]:
    """Return {name: statement} for the blocks in ``path``, fragments spliced in."""
    files: dict[Path, dict[str, str]] = {}

    def blocks_of(sql: Path) -> dict[str, str]:
        if sql not in files:
            files[sql] = _blocks(sql)
        return files[sql]

    def expand(sql: Path, name: str, using: tuple[tuple[Path, str], ...] = ()) -> str:
        blocks = blocks_of(sql)
        if name not in blocks:
            user_file, user = using[-1]
            used = name if user_file == sql else f"{sql.stem}.{name}"
            raise ValueError(f"{user_file.name}: {user!r} uses {used!r}, which is no block")
        if (sql, name) in using:
            raise ValueError(f"{sql.name}: {name!r} uses itself")

        def splice(used: re.Match) -> str:
            stem, _, fragment = used[1].rpartition(".")
            other = sql.with_name(f"{stem}.sql") if stem else sql
            return expand(other, fragment, (*using, (sql, name)))

        return _USE.sub(splice, blocks[name])

    return {name: expand(path, name) for name in blocks_of(path) if not name.startswith("_")}


def _blocks(path: Path) -> dict[str, str]:
    """{name: text} of the blocks in ``path``, comment lines left out, nothing spliced yet."""
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
    return blocks


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
        self._prepared: dict[str, Prepared] = {}

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

    def together(self, *calls: tuple[str, dict[str, object]], wait_for_flush: bool = True,
                 prepare: bool = True) -> list[list[Row]]:
        """Run several statements in one round trip and one transaction: the string of them is
        one implicit transaction, all committed or none. Return each one's rows.
        ``wait_for_flush`` as for ``rows``, for the whole string. Each is bound on the client
        (psycopg's ClientCursor, as Django's cursors are), so that their parameters' names cannot
        meet; with DATABASE_PREPARED_STATEMENTS (and ``prepare``: not for a statement whose best
        plan depends on its parameters' values) each is prepared on the connection first (once)
        and executed by name, with a generic plan."""
        prepared = prepare and settings.DATABASE_PREPARED_STATEMENTS
        with connection.cursor() as cursor:
            lead = [] if wait_for_flush or connection.in_atomic_block else [NO_FLUSH_WAIT]
            if prepared:
                lead.append(GENERIC_PLAN)
            text = "".join(lead)
            for n, (name, params) in enumerate(calls):
                if prepared:
                    call = self.prepare(name, cursor)
                    statement = call.set_locals + call.execute
                else:
                    statement = self.statements[name]
                text += (";\n" if n else "") + cursor.mogrify(statement, params)
            cursor.execute(text)
            for _ in lead:
                cursor.nextset()
            results = []
            for name, _ in calls:
                for _ in range(self._settings[name]):
                    cursor.nextset()
                columns = [column.name for column in cursor.description or ()]
                results.append([dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
                               if columns else [])
                cursor.nextset()
            return results

    def prepare(self, name: str, cursor) -> Prepared:
        """The statement, prepared on this cursor's connection if it is not yet. PREPARE is not
        transactional: a rollback of the caller's transaction leaves it prepared."""
        statement = self.statements[name]
        prepared = self._prepared.get(name)
        # made again when the text changed (tests' mutants replace a statement in place): its
        # name holds a hash of its text, so the new text is prepared under a name of its own
        if prepared is None or prepared.source is not statement:
            prepared = self._prepared[name] = Prepared.of(f"growth_{self.path.stem}_{name}",
                                                          statement)
        on_this_connection = _PREPARED_ON.setdefault(connection.connection, set())
        if prepared.name not in on_this_connection:
            cursor.execute(prepared.definition)
            on_this_connection.add(prepared.name)
        return prepared

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


@dataclass(frozen=True)
class Prepared:
    """A block as a prepared statement: its definition (PREPARE, parameters numbered in order of
    first use, SET LOCALs left out), its call (EXECUTE, the parameters by name) and the SET
    LOCALs to send before each call."""

    name: str
    definition: str
    execute: str
    set_locals: str = ""
    source: str = ""  # the block it was made from

    @classmethod
    def of(cls, name: str, statement: str) -> Prepared:
        order: list[str] = []

        def number(placeholder: re.Match) -> str:
            if placeholder[0] == "%%":  # psycopg's escape, for a statement sent without params
                return "%"
            if placeholder[1] not in order:
                order.append(placeholder[1])
            return f"${order.index(placeholder[1]) + 1}"

        set_locals, rest = split_settings(statement)
        body = _PLACEHOLDER.sub(number, rest)
        # named by its text too: two files' blocks of one name, or two versions of a block, never
        # take each other's place on a connection
        name = f"{name}_{hashlib.blake2s(body.encode(), digest_size=4).hexdigest()}"
        arguments = f"({', '.join(f'%({param})s' for param in order)})" if order else ""
        return cls(name, f"PREPARE {name} AS {body}", f"EXECUTE {name}{arguments}", set_locals,
                   statement)


def split_settings(statement: str) -> tuple[str, str]:
    """(its SET LOCAL lines, the statement itself): for tools that EXPLAIN a statement."""
    rest = statement
    while match := _SET_LOCAL.match(rest):
        rest = rest[match.end():]
    return statement[:len(statement) - len(rest)], rest


def _count_settings(statement: str) -> int:
    """How many SET LOCAL lines the statement begins with (each ends its line)."""
    return split_settings(statement)[0].count("\n")
