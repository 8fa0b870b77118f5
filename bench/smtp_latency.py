"""The SMTP path against a receiver that answers like a real relay: after 0, 20 or 50 ms.

A relay answers each message in tens of milliseconds, so one connection caps a sender at a few
dozen messages a second whatever the database can do; the engine therefore delivers on C
connections at once (``growth.sending.wires``). This family measures whether it keeps up with a
raw client on as many connections, at every C and every delay:

- the receiver: one ``bench.smtp.Sink`` (aiosmtpd, a process of its own) that waits the delay
  before its reply to DATA (and to each RCPT with ``rcpt=True``) with ``asyncio.sleep``, so that
  it serves every connection at once; it counts what it took, and each run checks the count.
  It advertises PIPELINING (RFC 2920), as real relays do: the engine sends each envelope in one
  write there, raw smtplib cannot;
- **raw smtplib**: one process, C threads, each with its own ``smtplib.SMTP`` (connected and
  greeted before the clock), sending pre-built copies of the engine's own rendering of one
  recipient, taken from one shared queue;
- **engine**: one ``run_sender`` process with ``SENDER_CONNECTIONS=C`` and Django's SMTP backend,
  timed as ``bench.engine`` times it (campaign resume to ``finished_at``; its connections open
  at first use, on the clock, as in production), once with a plain
  receiver (each wire takes 5-message chunks of the batch, handing each over just before it goes
  on the wire, in the commit that settles the wire's last one) and once with an idempotent one
  (the claimed batch shared out between the C connections);
- with ``chunks`` (``--latency-chunks 20``), the engine again with a plain receiver and
  SENDER_HANDOFF_CHUNK at each of them (``plain-20``): fewer statements on each wire, more in
  doubt after a kill (one chunk per connection);
- with ``unprepared`` (``--latency-unprepared``), the engine again with a plain receiver and
  DATABASE_PREPARED_STATEMENTS off (``plain-unprepared``): its statements on the wires parsed and
  planned by PostgreSQL on every call, as before they were prepared;
- with ``unpipelined`` (``--latency-unpipelined``), the engine again with a plain receiver
  against the same sink not advertising PIPELINING (``plain-unpipelined``): the envelope one
  command and one round trip at a time, as raw smtplib always sends it;
- with ``loads`` (``--latency-loads 0.4,0.8``), raw smtplib again beside a ``Hog`` that keeps
  that many cores busy (``smtplib+0.8``): whether busy cores as such slow a client that waits on
  its sockets.

The batch is ``per_connection`` × C (20 × C by default: 20 at C = 1, 640 at C = 32). A plain
receiver's batch needs at least 5 × C rows (SENDER_HANDOFF_CHUNK) for every wire to get a chunk;
20 × C gives each wire four chunks a batch. With an idempotent receiver each wire gets
``per_connection`` messages of every batch.

N is scaled to what raw smtplib is expected to do in ``seconds`` (C ÷ (delay + PER_MESSAGE),
at most RATE_CAP a second), rounded up to whole batches, at least MIN_BATCHES: at 50 ms and C = 1
and 3 seconds that is 60 messages, at 0 ms and C = 32 several thousand.

Beside each time, the CPU the whole machine spent on the clock (``/proc/stat`` sampled every
20 ms and read over the contender's clocked window: every process, the sink's and PostgreSQL's
included), per message and as a share of all its cores: a point whose cores were busy all along
measures the machine's CPU, not the receiver's latency.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.procs import CpuSampler

PER_MESSAGE = 0.0015  # seconds a message costs beside the delay (1-5 ms seen on 2 busy cores)
RATE_CAP = 2000.0  # messages/s: about what one sink and one sending process reach at no delay
MIN_BATCHES = 3  # so that a batch boundary is part of every point
CONTENDERS = ("smtplib", "plain", "idempotent")
HANDOFF_CHUNK = 5  # the workers' SENDER_HANDOFF_CHUNK (bench.engine gives them the default)


@dataclass(frozen=True, slots=True)
class Point:
    delay_ms: int  # the receiver's wait before answering DATA (and RCPT when asked)
    connections: int  # C: raw smtplib's threads, the engine's SENDER_CONNECTIONS
    batch: int  # the engine's --batch-size
    recipients: int  # N


def plan(*, delays_ms: list[int], connections: list[int], seconds: float,
         per_connection: int) -> list[Point]:
    """Every (delay, C) point, with its batch and N."""
    points = []
    for delay_ms in delays_ms:
        for count in connections:
            batch = per_connection * count
            rate = min(count / (delay_ms / 1000 + PER_MESSAGE), RATE_CAP)
            batches = max(math.ceil(seconds * rate / batch), MIN_BATCHES)
            points.append(Point(delay_ms, count, batch, batches * batch))
    return points


def measure(*, delays_ms: list[int], connections: list[int], seconds: float, per_connection: int,
            repetitions: int, rcpt: bool, out: Path, say: Callable[[str], None],
            chunks: list[int] = (), loads: list[float] = (), unprepared: bool = False,
            unpipelined: bool = False) -> dict:
    """Seconds of each contender at each point, per repetition (repetitions outermost)."""
    from bench import data, smtp

    if per_connection < max((HANDOFF_CHUNK, *chunks)):
        raise ValueError(f"a batch of fewer than {max((HANDOFF_CHUNK, *chunks))} rows per connection "
                         "leaves wires without a chunk with a plain receiver")
    contenders = (*CONTENDERS, *(f"plain-{chunk}" for chunk in chunks),
                  *(["plain-unprepared"] if unprepared else []),
                  *(["plain-unpipelined"] if unpipelined else []),
                  *(f"smtplib+{load:g}" for load in loads))
    points = plan(delays_ms=delays_ms, connections=connections, seconds=seconds,
                  per_connection=per_connection)
    timings = {point: {name: [] for name in contenders} for point in points}
    cpu = {point: {name: [] for name in contenders} for point in points}  # busy core-seconds
    with smtp.Sink() as sink, CpuSampler() as sampler:
        for rep in range(1, repetitions + 1):
            say(f"smtp-latency: repetition {rep} of {repetitions}")
            for point in points:
                delay = point.delay_ms / 1000
                sink.answer_after(delay, rcpt=delay if rcpt else 0.0)
                audience = data.audience(point.recipients)
                for name in contenders:
                    timings[point][name].append(
                        _run(name, point=point, audience=audience, sink=sink, out=out))
                    cpu[point][name].append(sampler.busy_between(*_clocked_window(name)))
                rates = {name: point.recipients / s[-1] for name, s in timings[point].items()}
                per_message = {name: c[-1] / point.recipients for name, c in cpu[point].items()}
                say(f"  {point.delay_ms:>3} ms  C {point.connections:>2}  N {point.recipients:>5}  "
                    + "  ".join(f"{name} {rate:,.0f} /s" for name, rate in rates.items())
                    + "  (" + ", ".join(f"{name} {rates[name] / rates['smtplib']:.2f}×"
                                        for name in contenders[1:])
                    + ")  CPU a message "
                    + ", ".join(f"{name} {per_message[name] * 1e6:,.0f} µs" for name in contenders)
                    + "; cores busy " + ", ".join(
                        f"{cpu[point][name][-1] / timings[point][name][-1] / os.cpu_count():.0%}"
                        for name in contenders))
    return {"delays_ms": delays_ms, "connections": connections, "per_connection": per_connection,
            "rcpt": rcpt, "chunks": list(chunks), "loads": list(loads), "unprepared": unprepared,
            "unpipelined": unpipelined, "seconds_target": seconds,
            "points": [{"delay_ms": p.delay_ms, "connections": p.connections, "batch": p.batch,
                        "recipients": p.recipients, "seconds": timings[p], "cpu_seconds": cpu[p]}
                       for p in points], "cores": os.cpu_count()}


def _run(contender: str, *, point: Point, audience, sink, out: Path) -> float:
    from bench import smtp

    if contender.startswith("smtplib"):
        _, _, load = contender.partition("+")
        with Hog(float(load or 0)):
            return smtp.raw_threads_run(audience=audience, connections=point.connections,
                                        sink=sink)
    mode, _, variant = contender.partition("-")
    chunk = int(variant) if variant.isdigit() else None
    sink.advertise_pipelining(variant != "unpipelined")
    try:
        return _engine_run(mode, variant, chunk, point=point, audience=audience, sink=sink,
                           out=out)
    finally:
        sink.advertise_pipelining(True)


def _engine_run(mode: str, variant: str, chunk: int | None, *, point: Point, audience, sink,
                out: Path) -> float:
    from bench import smtp

    return smtp.engine_run(audience=audience, workers=1, batch_size=point.batch, sink=sink,
                           idempotent=mode == "idempotent", out=out,
                           connections=point.connections, chunk=chunk,
                           prepared=variant != "unprepared",
                           name=f"latency{point.delay_ms}ms-c{point.connections}"
                                + (f"-chunk{chunk}" if chunk else "")
                                + (f"-{variant}" if variant in ("unprepared", "unpipelined")
                                   else ""))


def _clocked_window(contender: str) -> tuple[float, float]:
    from bench import engine, smtp

    return smtp.last_window if contender.startswith("smtplib") else engine.last_window


class Hog:
    """``cores`` of CPU kept busy by processes of their own, in 2 ms duty cycles (busy, then
    asleep), as other work on the machine would: each process takes an equal share."""

    PERIOD = 0.002

    def __init__(self, cores: float) -> None:
        self._stop = multiprocessing.Event()
        count = math.ceil(cores)
        self._processes = [multiprocessing.Process(target=_burn, args=(cores / count, self._stop),
                                                   daemon=True) for _ in range(count)]

    def __enter__(self) -> Hog:
        for process in self._processes:
            process.start()
        time.sleep(0.3 if self._processes else 0)  # started and burning before the clock
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        for process in self._processes:
            process.join()


def _burn(share: float, stop) -> None:
    busy = Hog.PERIOD * share
    while not stop.is_set():
        started = time.perf_counter()
        while time.perf_counter() - started < busy:
            pass
        time.sleep(Hog.PERIOD - busy)
