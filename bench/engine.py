"""The engine: real ``run_sender`` processes, timed from campaign start to campaign 'sent'.

The recipients are built (by the engine's own build) and the campaign paused before the workers
start, so their start-up (Python, Django, the first connection) is not on the clock; the clock
starts when the campaign is resumed and stops at its ``finished_at``, both read from the
database. Workers log at INFO, as in production (one line per batch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from bench import data
from bench.procs import PeakRSS
from growth.chaos.fleet import database_url

MANAGE_PY = Path(settings.BASE_DIR) / "manage.py"
NULL = "growth.sending.transports.null.NullTransport"
READY_TIMEOUT = 120.0  # seconds for every worker to say "started"
POLL = 0.05  # seconds between looks at the campaign
TIMEOUT = 7200.0  # seconds for one campaign
last_window: tuple[float, float] = (0.0, 0.0)  # run()'s clock, epoch seconds: (resumed, finished)


def sender_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SENDER_", "EMAIL_"))}
    env.update({"DATABASE_URL": database_url(connection.settings_dict), "LOG_LEVEL": "INFO"})
    env.update(extra)
    return env


def start_senders(count: int, *, env: dict[str, str], args: list[str], log_dir: Path,
                  name: str) -> list[tuple[subprocess.Popen, Path]]:
    log_dir.mkdir(parents=True, exist_ok=True)
    senders = []
    for n in range(count):
        log_path = log_dir / f"{name}-w{n}.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(
                [sys.executable, str(MANAGE_PY), "run_sender", "--worker-id", f"{name}-w{n}", *args],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        senders.append((process, log_path))
    return senders


def wait_started(senders) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    for process, log_path in senders:
        while "started" not in log_path.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"run_sender did not start; see {log_path}")
            time.sleep(POLL)


def stop(senders) -> None:
    for process, _ in senders:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process, _ in senders:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run(*, audience, batch_size: int, workers: int, out: Path, transport: str = NULL,
        env: dict[str, str] | None = None, name: str = "engine", leases: bool | None = None) -> float:
    """Seconds from campaign start to campaign 'sent' with ``workers`` run_sender processes
    (``leases``: the campaign built for the lease protocol; None: as the bench's own
    SENDER_PROTOCOL says, as run_sender's build would)."""
    if leases is None:
        leases = data.on_leases()
    campaign_id = data.built_and_paused(audience, leases=leases)
    extra = {"SENDER_TRANSPORT": transport, **(env or {})}
    senders = start_senders(workers, env=sender_env(**extra), log_dir=out / "logs",
                            args=["--batch-size", str(batch_size), "--tick", str(POLL)],
                            name=f"{name}-b{batch_size}")
    try:
        wait_started(senders)
        started = data.resume(campaign_id)
        deadline = time.monotonic() + TIMEOUT
        while (finished := data.finished_at(campaign_id)) is None:
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in senders):
                raise RuntimeError(f"campaign {campaign_id} did not finish: {data.counts(campaign_id)}")
            time.sleep(POLL)
    finally:
        stop(senders)
    sent = data.counts(campaign_id).get("sent", 0)
    assert sent == audience.size, f"{name}: {sent} of {audience.size} sent"
    global last_window
    last_window = (started, finished)
    return finished - started


def peak_rss(*, audience, batch_size: int, out: Path) -> tuple[int, float]:
    """Run one ``run_sender --until-idle`` over a whole campaign (build included, as in
    production); return its peak resident memory (bytes) and its wall time (seconds)."""
    data.fresh_sends()
    data.approved_campaign(audience)
    started = time.monotonic()
    senders = start_senders(1, env=sender_env(SENDER_TRANSPORT=NULL), log_dir=out / "logs",
                            args=["--batch-size", str(batch_size), "--until-idle"],
                            name=f"memory-{audience.size}")
    process, log_path = senders[0]
    meter = PeakRSS(process.pid)
    try:
        while process.poll() is None:
            meter.poll()
            time.sleep(0.02)
            if time.monotonic() - started > TIMEOUT:
                raise RuntimeError("the memory run did not finish")
    finally:
        stop(senders)
    if process.returncode != 0:
        raise RuntimeError(f"run_sender exited {process.returncode}; see {log_path}")
    return meter.peak, time.monotonic() - started
