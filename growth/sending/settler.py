"""Bookkeeping that runs beside the worker's loop, on a database connection of its own.

Settling a batch is PostgreSQL's work; claiming and rendering the next one is mostly the worker's.
Done one after the other, each waits for the other. Handed to a thread of its own (which mostly
waits on its socket, without the GIL), the settle of one batch overlaps the claim and rendering of
the next, and PostgreSQL writes both on two cores. The worker uses it with an idempotent receiver
only: a row left unsettled by a kill is then retried under its key and absorbed, where with a
plain receiver it would be 'unknown' for an operator.

Calls run one at a time, in the order given. At most ``depth`` wait: the loop then blocks instead
of racing ahead, so that what a kill leaves unsettled stays bounded (those rows are 'sending'
under a lease, and lease expiry handles them as after any crash between send and settle).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from django.db import connection

logger = logging.getLogger(__name__)

_STOP = object()


class Settler:
    def __init__(self, *, depth: int = 1, name: str = "settler") -> None:
        self._calls: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], object]) -> None:
        """Run ``call`` after those submitted before it (blocks while ``depth`` calls wait)."""
        self._calls.put(call)

    def drain(self) -> None:
        """Return once every call submitted so far has run."""
        self._calls.join()

    def close(self) -> None:
        """Run what was submitted, then stop the thread."""
        self._calls.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        try:
            while (call := self._calls.get()) is not _STOP:
                try:
                    call()
                except Exception:  # a bug: its rows keep their lease, which expiry returns
                    logger.exception("settling failed")
                finally:
                    self._calls.task_done()
        finally:
            self._calls.task_done()
            connection.close()  # this thread's own


class InlineSettler:
    """The same interface, running each call at once: with a plain receiver, and for a single
    ``Worker.cycle()``."""

    def submit(self, call: Callable[[], object]) -> None:
        call()

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass
