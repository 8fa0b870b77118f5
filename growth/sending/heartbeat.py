"""A worker's "alive" signal, beaten from a thread of its own.

Beaten from the loop alone, it went stale whenever the loop waited (an idle worker sleeps its
tick, a minute by default) or sent a long batch on one connection (a slow relay): the admin then
called a live worker dead, and a liveness probe on the heartbeat file killed it mid-batch. The
thread beats every ``every`` seconds, but only while the loop has come round within
``stale_after`` seconds (its longest honest absence: a tick idle, a lease busy): a loop that is
stuck lets its heartbeat go stale, as it should.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connection

from growth.managers.queries import DATABASE_AWAY, discard_connection

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, beat: Callable[[], None], *, every: float, stale_after: float) -> None:
        self._beat = beat
        self.every = every
        self.stale_after = stale_after
        self._came_round = time.monotonic()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def came_round(self) -> None:
        """The loop is alive (called at each of its turns, and before and after each wait)."""
        self._came_round = time.monotonic()

    def start(self) -> None:
        self.came_round()
        self._stopped.clear()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            while not self._stopped.wait(self.every):
                if time.monotonic() - self._came_round > self.stale_after:
                    continue  # the loop is stuck: its heartbeat goes stale
                try:
                    self._beat()
                except DATABASE_AWAY as exc:  # the loop waits for the database
                    discard_connection()
                    logger.debug("heartbeat not recorded: %s", exc)
        finally:
            connection.close()  # this thread's own
