"""SIGTERM to ``run_sender`` while the database is unreachable (or the relay is down): out
within a few seconds, exit code 0, a clear last line, no flood of log lines, and every row it
held settled or recoverable.

A real ``run_sender`` process reaches PostgreSQL through tests.servers.TcpProxy, which the test
cuts (every connection closed, new ones refused)."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from growth.models import Send, SendLease, WorkerHeartbeat
from tests.helpers import manage, subprocess_env, wait_for
from tests.scenarios import approved_campaign, rows_by_status
from tests.servers import TcpProxy
from tests.smtp import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROMPT = 8.0  # seconds from SIGTERM to exit that we call prompt
LEASE = 60  # seconds: long enough that nothing expires on its own during a test


@pytest.fixture
def proxy():
    proxy = TcpProxy()
    yield proxy
    proxy.close()


@pytest.fixture
def sender(smtp_server, proxy, tmp_path):
    started: list[tuple[subprocess.Popen, Path]] = []

    def start(*, protocol: str = "rows", idempotent: bool = False,
              email_url: str | None = None) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"sender-{len(started)}.log"
        env = subprocess_env(DATABASE_URL=proxy.database_url,
                             EMAIL_URL=email_url or smtp_server.url,
                             SENDER_IDEMPOTENT_TRANSPORT="true" if idempotent else "false",
                             SENDER_PROTOCOL=protocol, SENDER_BACKOFF_BASE="0.1")
        with open(log, "w") as out:
            process = subprocess.Popen(
                manage("run_sender", "--batch-size", "20", "--tick", "0.2", "--lease", str(LEASE),
                       "--worker-id", "w"), env=env, stdout=out, stderr=subprocess.STDOUT)
        started.append((process, log))
        return process, log

    yield start
    for process, _ in started:
        if process.poll() is None:
            process.kill()
            process.wait()



def terminate(process: subprocess.Popen, log: Path) -> tuple[float, int | None, str]:
    """SIGTERM; (seconds until it exited (or gave up at 3 * PROMPT), exit code, the log written
    after the signal)."""
    before = len(log.read_text())
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=3 * PROMPT)
    except subprocess.TimeoutExpired:
        code = None
    took = time.monotonic() - signalled
    return took, code, log.read_text()[before:]


def recover_everything(protocol: str) -> None:
    """What another worker's recovery does once the leases run out (pulled forward)."""
    past = timezone.now() - timedelta(seconds=1)
    Send.objects.filter(status="sending").update(lease_expires_at=past)
    SendLease.objects.filter(worker_id__isnull=False).update(expires_at=past)
    Send.objects.recover_expired(idempotent=False, max_attempts=5)
    SendLease.objects.recover(idempotent=False, max_attempts=5)


def test_sigterm_while_idle_in_an_outage_exits_at_once(sender, proxy):
    process, log = sender()
    wait_for(lambda: WorkerHeartbeat.objects.filter(worker_id="w").exists())
    proxy.cut()
    wait_for(lambda: "database unavailable" in log.read_text(), timeout=30)
    took, code, after = terminate(process, log)
    assert code == 0 and took < PROMPT, f"exit {code} after {took:.1f}s:\n{after[-3000:]}"
    assert "Traceback" not in after
    assert "worker w stopped" in after


@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_sigterm_with_a_batch_on_the_wires_in_an_outage_exits_promptly_and_loses_nothing(
        sender, proxy, smtp_server, protocol):
    campaign = approved_campaign(count=300)
    smtp_server.handler.delay = 0.02  # a chunk of 5 takes 0.1 s on its wire
    process, log = sender(protocol=protocol)
    wait_for(lambda: len(smtp_server.handler.keys()) >= 25)
    proxy.cut()  # the wires' next hand-over (and the loop's next claim) finds no database
    wait_for(lambda: "database unavailable" in log.read_text(), timeout=30)
    took, code, after = terminate(process, log)
    retries = after.count("database unavailable")
    proxy.mend()

    # nothing lost: once recovered, what the relay got is 'sent' or 'unknown', nothing is left
    # 'sending', and every row is somewhere a worker or an operator finds it
    recover_everything(protocol)
    keys = smtp_server.handler.keys()
    rows = dict(Send.objects.filter(campaign=campaign).values_list("job_id", "status"))
    assert set(rows.values()) <= {"sent", "queued", "unknown"}, rows_by_status(campaign)
    assert all(rows[key] in ("sent", "unknown") for key in keys)
    assert [key for key, n in keys.items() if n > 1] == []
    # and out promptly, saying so once, not thousands of times
    assert code == 0 and took < PROMPT, (
        f"exit {code} after {took:.1f}s, {retries} 'database unavailable' lines after SIGTERM; "
        f"its last lines:\n{after[-1500:]}")
    assert retries < 20, f"{retries} 'database unavailable' lines after SIGTERM"
    assert "Traceback" not in after
    assert "worker w stopped" in after


def test_sigterm_while_the_relay_refuses_connections_exits_promptly(sender):
    campaign = approved_campaign(count=100)
    # nothing listens on this port: every connection is refused
    process, log = sender(email_url=f"smtp://127.0.0.1:{free_port()}")
    wait_for(lambda: Send.objects.filter(campaign=campaign).exclude(last_error="").exists())
    took, code, after = terminate(process, log)
    assert code == 0 and took < PROMPT, f"exit {code} after {took:.1f}s:\n{after[-3000:]}"
    assert "Traceback" not in after
    recover_everything("rows")
    assert set(rows_by_status(campaign)) <= {"queued", "unknown", "failed"}
