"""Worker processes (not threads: the GIL) started together on a signal, and timed.

``timed_pool`` runs ``target(index, *args)`` in ``count`` fresh interpreters (spawn: nothing of
the parent's Django state or database connection is inherited). Each child prepares (imports,
connects, builds its messages), calls ``ready()``, waits for the go, works, and returns; the
parent reports the seconds from the go to the last child's end.
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

SPAWN = multiprocessing.get_context("spawn")
# timed_pool's last clock, epoch seconds: (the go, the last child's end), for CpuSampler
last_window: tuple[float, float] = (0.0, 0.0)
READY_TIMEOUT = 120.0  # seconds for a child to import and connect
POLL = 0.02  # seconds between looks at a child's memory


@dataclass(frozen=True, slots=True)
class PoolResult:
    seconds: float  # from the go to the last child's end
    results: list  # what each child's target returned
    started: float = 0.0  # the go, epoch seconds


def _child(target, index, args, ready_queue, go, done_queue) -> None:
    def ready() -> None:
        ready_queue.put(index)
        go.wait()

    try:
        result = target(index, ready, *args)
        done_queue.put((index, time.time(), result, None))
    except BaseException as exc:  # reported to the parent, which raises it
        done_queue.put((index, time.time(), None, f"{type(exc).__name__}: {exc}"))
        raise


def timed_pool(count: int, target: Callable, *args, timeout: float = 3600.0) -> PoolResult:
    """Run ``target(index, ready, *args)`` in ``count`` processes released at once."""
    ready_queue, done_queue, go = SPAWN.Queue(), SPAWN.Queue(), SPAWN.Event()
    processes = [SPAWN.Process(target=_child, args=(target, i, args, ready_queue, go, done_queue),
                               daemon=True) for i in range(count)]
    for process in processes:
        process.start()
    try:
        _wait_ready(ready_queue, processes)
        started = time.time()
        go.set()
        finished, results = [], [None] * count
        for _ in range(count):
            index, at, result, error = done_queue.get(timeout=timeout)
            if error:
                raise RuntimeError(f"worker {index} failed: {error}")
            finished.append(at)
            results[index] = result
        global last_window
        last_window = (started, max(finished))
        return PoolResult(max(finished) - started, results, started)
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def _wait_ready(ready_queue, processes) -> None:
    deadline, waiting = time.monotonic() + READY_TIMEOUT, len(processes)
    while waiting:
        try:
            ready_queue.get(timeout=0.2)
            waiting -= 1
        except queue.Empty:
            dead = [p.exitcode for p in processes if p.exitcode is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"a worker did not get ready (exit codes {dead})") from None


class PeakRSS:
    """Poll a process's resident memory; ``peak`` is the highest seen (bytes).

    Linux also keeps the true high-water mark (VmHWM), read at every poll, so a spike between two
    polls is not missed; elsewhere the polled maximum is what we have.
    """

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._status = Path(f"/proc/{pid}/status")

    def poll(self) -> None:
        try:
            rss = self.process.memory_info().rss
            if self._status.exists():
                for line in self._status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        rss = max(rss, int(line.split()[1]) * 1024)
            self.peak = max(self.peak, rss)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError, ProcessLookupError):
            pass


class CpuSampler:
    """The machine's busy CPU-seconds, sampled every EVERY seconds on a thread of its own."""

    EVERY = 0.02

    def __init__(self) -> None:
        self._times: list[float] = []
        self._busy: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def busy_between(self, start: float, end: float) -> float:
        """CPU-seconds between two epoch times (the nearest samples inside the window)."""
        first = bisect.bisect_left(self._times, start)
        last = bisect.bisect_right(self._times, end) - 1
        if last <= first:
            return 0.0
        covered = self._times[last] - self._times[first]
        return (self._busy[last] - self._busy[first]) * (end - start) / covered

    def _sample(self) -> None:
        while not self._stop.wait(self.EVERY):
            self._times.append(time.time())
            self._busy.append(_busy_seconds())


def _busy_seconds() -> float:
    """CPU-seconds the whole machine has spent not idle since boot (all cores, every process):
    user, nice, system, irq and softirq; not iowait, nor a virtual machine's steal (its cores
    kept waiting by the host's other guests: not work of ours)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = (
            int(value) for value in stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
