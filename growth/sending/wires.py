"""The connections a worker delivers on at once: C lanes, each a thread with a transport (its
connection to the relay or the ESP) and a database connection of its own.

A relay answers each message in tens of milliseconds: on one connection a worker sends a few dozen
messages a second whatever the database can do. With C lanes it keeps C pieces of work on the wire
at once, and the worker's loop, which only claims and deals out batches, never makes them wait
for it: with a plain receiver a chunk is rendered on its lane, handed over (committed with the
settle of the lane's last chunk, and with the other lanes' hand-overs waiting at the same time:
``growth.sending.hand_overs``) and sent on its lane. A kill leaves in doubt at most what the lanes
had handed over and not settled: one chunk each, C in all.
Threads, not asyncio: transports are blocking clients (smtplib, Django's email backends, the ESPs'
HTTP clients), and a thread waiting on its socket or its database does not hold the GIL.

A worker therefore holds up to C + 3 database connections (its loop, its settler, its hand-overs,
its lanes: a lane settles its last chunk of a batch on its own), C + 4 while it serves campaigns
of both send protocols (each protocol's hand-overs commit on a thread of their own):
with many workers, put PgBouncer in front of PostgreSQL (the engine runs under transaction
pooling). With one lane there are no threads at all: the work runs on the caller's thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from django.db import connection

from growth.sending.transports import BaseTransport

T = TypeVar("T")
Job = Callable[[BaseTransport], T]

_STOP = object()


class Wires:
    def __init__(self, transport: BaseTransport, count: int) -> None:
        if count < 1:
            raise ValueError("a worker needs at least one connection")
        self.count = count
        self._transports = [transport, *(transport.copy() for _ in range(count - 1))]
        self._free = threading.Semaphore(count)  # lanes with nothing to do
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lanes: list[threading.Thread] = []  # started on first use, again after close()

    def run(self, job: Job) -> Future:
        """Run ``job(transport)`` on the next free lane, waiting for one if all are busy; the
        future's result is what the job returned (or the exception it raised)."""
        done: Future = Future()
        if self.count == 1:  # one lane: on the caller's thread, as if there were no lanes at all
            try:
                done.set_result(job(self._transports[0]))
            except Exception as exc:
                done.set_exception(exc)
            return done
        self._free.acquire()
        if not self._lanes:
            self._lanes = [threading.Thread(target=self._lane, args=(transport,), daemon=True,
                                            name=f"wire-{n}")
                           for n, transport in enumerate(self._transports)]
            for lane in self._lanes:
                lane.start()
        self._jobs.put((job, done))
        return done

    def close(self) -> None:
        """Let the lanes finish what they hold, then close every connection, the database's
        included (a later run() starts them again: a Worker may run() more than once)."""
        lanes, self._lanes = self._lanes, []
        for _ in lanes:
            self._jobs.put(_STOP)
        for lane in lanes:
            lane.join()
        for transport in self._transports:
            transport.close()

    def _lane(self, transport: BaseTransport) -> None:
        try:
            while (item := self._jobs.get()) is not _STOP:
                job, done = item
                try:
                    done.set_result(job(transport))
                except BaseException as exc:  # the caller decides: the campaign's, the database's
                    done.set_exception(exc)
                finally:
                    self._free.release()
        finally:
            connection.close()  # this lane's own
