"""An idle worker sleeps, and a live worker says it is alive.

An idle worker looks at the database once a tick, not every 50 ms (the outlook read "nothing
waiting" as "due now"). Its heartbeat is beaten from a thread of its own, so that the admin's
Workers page and a liveness probe on --heartbeat-file see it alive while it sleeps its tick or
sends a long batch on one connection; a loop that is stuck lets it go stale."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from django.db import connection
from django.utils import timezone

from growth.admin.workers import LATE, is_alive
from growth.models import Campaign, WorkerHeartbeat
from growth.sending.heartbeat import Heartbeat
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests.helpers import manage, subprocess_env
from tests.scenarios import approved_campaign, statuses

pytestmark = [pytest.mark.django_db(transaction=True)]

def test_outlook_says_nothing_is_waiting_on_an_empty_database():
    outlook = Campaign.objects.outlook()
    assert not outlook.busy
    assert outlook.next_in is None, f"next_in={outlook.next_in!r}: an idle worker spins"


def test_an_idle_worker_sleeps_its_tick():
    worker = Worker(worker_id="idle", tick=60.0, transport=NullTransport())
    waits = []

    def wait(seconds=None):
        waits.append(seconds)
        worker._stop.set()
        return True

    worker._stop.wait = wait
    worker._loop()
    assert waits and waits[0] == 60.0, f"idle wait was {waits[0]!r}s, not the 60s tick"


def _statements_ending(application_name: str, seconds: float) -> int:
    """How many statements the backends under this application name ended in `seconds`, read
    off pg_stat_activity every 10 ms: each one that ends moves its backend's state_change.

    Only the worker's own connections are watched (PGAPPNAME names them): the database's commit
    counter counts every backend's transactions, and CI once read 36 in 5 s beside an idle
    worker."""
    def states() -> set[tuple[int, object]]:
        cursor.execute("SELECT pid, state_change FROM pg_stat_activity"
                       " WHERE application_name = %s AND state <> 'active'", [application_name])
        return set(cursor.fetchall())

    deadline = time.monotonic() + seconds
    with connection.cursor() as cursor:
        before = states()
        seen = set(before)
        while time.monotonic() < deadline:
            time.sleep(0.01)
            seen |= states()
    return len(seen - before)


def _wait_until_quiet(application_name: str, worker: subprocess.Popen) -> None:
    """Until a whole second passes in which the worker ends no statement: it started, went
    round once and sleeps its tick (a slow start would otherwise be counted as idling)."""
    deadline = time.monotonic() + 60
    while _statements_ending(application_name, 1.0) > 0 or not _connected(application_name):
        assert worker.poll() is None, "the worker exited"
        assert time.monotonic() < deadline, "the worker never went quiet for a second"


def _connected(application_name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                       [application_name])
        return cursor.fetchone()[0] > 0


def test_an_idle_run_sender_leaves_the_database_alone(tmp_path):
    name = "idle-run-sender-under-test"
    worker = subprocess.Popen(manage("run_sender", "--worker-id", "idle-proc"),  # default --tick 60
                              env=subprocess_env(EMAIL_URL=f"filemail://{tmp_path}", PGAPPNAME=name),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until_quiet(name, worker)
        ended = _statements_ending(name, 6.0)
        assert worker.poll() is None
        # a heartbeat a 5 s (one or two statements) and nothing else; a worker that looked at
        # the database every 50 ms would end a hundred
        assert ended < 10, f"{ended} statements in 6 s from an idle worker"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


def test_an_idle_worker_keeps_its_heartbeat(tmp_path):
    # a campaign approved for later: the worker waits min(--tick, its start) = 60 s between looks
    approved_campaign(count=2, scheduled_for=timezone.now() + timezone.timedelta(hours=1))
    beat = tmp_path / "alive"
    worker = subprocess.Popen(
        manage("run_sender", "--worker-id", "idle-one", "--heartbeat-file", str(beat)),
        env=subprocess_env(EMAIL_URL=f"filemail://{tmp_path}"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not WorkerHeartbeat.objects.filter(worker_id="idle-one").exists():
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.1)
        time.sleep(LATE.total_seconds() + 3)  # idle, alive, nothing to do
        assert worker.poll() is None
        row = WorkerHeartbeat.objects.get(worker_id="idle-one")
        file_age = time.time() - beat.stat().st_mtime
        # the admin's Workers page calls it dead; a liveness probe on the file kills it
        assert is_alive(row.seen_at, row.stopped_at), f"admin says dead (seen {row.seen_at})"
        assert file_age < LATE.total_seconds(), f"heartbeat file {file_age:.0f}s old"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


def test_a_worker_busy_on_a_slow_relay_keeps_its_heartbeat(smtp_server, tmp_path):
    """A relay that takes ~1 s a message (greylisting tarpits, a distant ESP): the loop beats
    only between batches, so a batch of 25 on one connection is 25 s without a beat."""
    smtp_server.handler.delay = 1.0
    campaign = approved_campaign(count=50)
    beat = tmp_path / "alive"
    worker = subprocess.Popen(
        manage("run_sender", "--worker-id", "busy-one", "--batch-size", "25", "--tick", "0.1",
               "--heartbeat-file", str(beat)),
        env=subprocess_env(EMAIL_URL=smtp_server.url, SENDER_CONNECTIONS="1"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worst_row = worst_file = 0.0
    try:
        deadline = time.monotonic() + 30
        while statuses(campaign).get("sent", 0) < 1:
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.2)
        until = time.monotonic() + 20
        while time.monotonic() < until:
            row = WorkerHeartbeat.objects.get(worker_id="busy-one")
            worst_row = max(worst_row, (timezone.now() - row.seen_at).total_seconds())
            worst_file = max(worst_file, time.time() - beat.stat().st_mtime)
            time.sleep(0.5)
        assert worker.poll() is None
        assert statuses(campaign).get("sent", 0) > 1  # it is working all along
        assert worst_row < LATE.total_seconds(), f"the admin called it dead: no beat for {worst_row:.0f}s"
        assert worst_file < LATE.total_seconds(), f"heartbeat file {worst_file:.0f}s old"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def test_the_heartbeat_stops_once_the_loop_has_not_come_round_for_too_long():
    beats: list[float] = []
    heartbeat = Heartbeat(lambda: beats.append(time.monotonic()), every=0.05, stale_after=0.3)
    heartbeat.start()
    try:
        time.sleep(0.25)
        assert len(beats) >= 2  # the loop came round at start: alive
        time.sleep(0.4)  # the loop never comes round again: stuck
        stuck = len(beats)
        time.sleep(0.3)
        assert len(beats) == stuck
        heartbeat.came_round()
        time.sleep(0.2)
        assert len(beats) > stuck
    finally:
        heartbeat.stop()
