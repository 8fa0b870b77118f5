"""The connections a worker delivers on at once: one transport per connection, each on a thread
of its own, each sending one chunk at a time.

A relay answers each message in tens of milliseconds: on one connection a worker sends a few dozen
messages a second whatever the database can do. With C connections it keeps C chunks on the wire
at once. The worker hands each chunk over (committed) before it goes on a wire and settles it
when the wire answers, so a kill leaves in doubt at most the chunks on the wires: C of them.
Threads, not asyncio: transports are blocking clients (smtplib, Django's email backends, the ESPs'
HTTP clients), and a thread waiting on its socket does not hold the GIL.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from growth.sending.transports import BaseTransport, Delivery, Outcome


class Wires:
    def __init__(self, transport: BaseTransport, count: int) -> None:
        if count < 1:
            raise ValueError("a worker needs at least one connection")
        self.count = count
        self._transports = [transport, *(transport.copy() for _ in range(count - 1))]
        self._idle: queue.SimpleQueue[BaseTransport] = queue.SimpleQueue()
        for each in self._transports:
            self._idle.put(each)
        self._pool: ThreadPoolExecutor | None = None  # made on first use, again after close()

    def send(self, deliveries: Sequence[Delivery],
             send: Callable[[BaseTransport, Sequence[Delivery]], list[Outcome]]) -> Future:
        """Send the chunk on an idle connection (the caller keeps at most ``count`` on the
        wire); the future's result is its outcomes."""
        transport = self._idle.get_nowait()  # queue.Empty: the caller's bug, never a wait

        def on_the_wire() -> list[Outcome]:
            try:
                return send(transport, deliveries)
            finally:
                self._idle.put(transport)

        if self.count > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.count, thread_name_prefix="wire")
            return self._pool.submit(on_the_wire)
        # one connection: sent on the caller's thread, as if there were no pool at all
        done: Future = Future()
        try:
            done.set_result(on_the_wire())
        except Exception as exc:
            done.set_exception(exc)
        return done

    def close(self) -> None:
        """Wait for the chunks on the wire, then close every connection (a later send opens
        them again: a Worker may run() more than once)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        for transport in self._transports:
            transport.close()
