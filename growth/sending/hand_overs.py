"""Plain receiver: the wires' hand-overs, committed together.

Each wire hands its next chunk over (settling its last one in the same commit) and sends the
chunk only once that commit is on disk. With C wires those commits come in bursts, and each one
on its own is a round trip, a backend woken and a WAL flush, on cores that the wires share with
PostgreSQL (and, on one host, with the relay). Here one thread of the worker takes every request
that is waiting whenever it is free, and commits them all in one round trip and one flush: group
commit, done on the worker's side. A wire still waits for the commit that holds its own chunk,
so a kill leaves in doubt what it did before, at most one chunk per wire.

One failure is everyone's: if the group's transaction fails, none of it was committed, and every
wire of the group gets the exception and retries (``Worker._retrying_db``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from django.db import connection

from growth.managers.queries import DATABASE_AWAY, discard_connection

Request = TypeVar("Request")
Result = TypeVar("Result")

_STOP = object()


class HandOvers(Generic[Request, Result]):
    def __init__(self, commit: Callable[[list[Request]], list[Result]]) -> None:
        self._commit = commit  # several requests -> one result each, in one transaction
        self._waiting: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None  # started on first use, again after close()
        self._lock = threading.Lock()

    def submit(self, request: Request) -> Result:
        """Commit ``request`` with whatever else is waiting; return its result, or raise what
        the group's commit raised."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="hand-overs")
                self._thread.start()
        done: Future = Future()
        self._waiting.put((request, done))
        return done.result()

    def close(self) -> None:
        """Commit what is waiting, then stop the thread and close its database connection."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._waiting.put(_STOP)
            thread.join()

    def _run(self) -> None:
        try:
            while (first := self._waiting.get()) is not _STOP:
                group, stopping = [first], False
                while not stopping:
                    try:
                        item = self._waiting.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                    else:
                        group.append(item)
                self._commit_group(group)
                if stopping:
                    return
        finally:
            connection.close()

    def _commit_group(self, group: Sequence[tuple[Request, Future]]) -> None:
        try:
            results = self._commit([request for request, _ in group])
            if len(results) != len(group):
                raise RuntimeError(f"{len(results)} answers to {len(group)} hand-overs")
        except BaseException as exc:  # each waiting wire re-raises it on its own thread
            if isinstance(exc, DATABASE_AWAY):
                discard_connection()
            for _, done in group:
                done.set_exception(exc)
            return
        for (_, done), result in zip(group, results, strict=True):
            done.set_result(result)
