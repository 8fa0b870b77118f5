"""The engine behind PgBouncer in transaction pooling mode (Debian's pgbouncer, started here on a
loopback port): no statement relies on session state, SET LOCAL and transaction-scoped advisory
locks stay inside their transaction, and real workers — killed, restarted, racing — and the
chaos harness send every recipient once through it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import psycopg
import pytest
from django.conf import settings

from growth.chaos import pgbouncer
from growth.chaos.harness import ChaosConfig, run
from growth.chaos.receiver import Misbehaviour
from growth.managers.queries import NO_FLUSH_WAIT
from growth.models import Campaign, Send
from tests.helpers import manage, subprocess_env
from tests.scenarios import approved_campaign, statuses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def bouncer_or_skip(tmp_path, **options) -> pgbouncer.PgBouncer:
    if not pgbouncer.available():
        if os.environ.get("REQUIRE_PGBOUNCER_TESTS"):
            pytest.fail("pgbouncer is missing (apt-get install pgbouncer)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    return pgbouncer.PgBouncer(**options)


@pytest.fixture
def bouncer(tmp_path):
    server = bouncer_or_skip(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def one_server_connection(tmp_path):
    """Every client shares a single server connection: whatever one leaves on the session, the
    next one would find."""
    server = bouncer_or_skip(tmp_path, pool_size=1)
    yield server
    server.stop()


def client(server) -> psycopg.Connection:
    # parameters bound client-side, as Django's backend binds them (no prepared statements)
    return psycopg.connect(server.database_url(), autocommit=True,
                           cursor_factory=psycopg.ClientCursor, prepare_threshold=None)


def test_the_engines_set_local_ends_with_its_statement(one_server_connection):
    with client(one_server_connection) as first, client(one_server_connection) as second:
        cursor = first.execute(NO_FLUSH_WAIT + "SELECT current_setting('synchronous_commit')")
        cursor.nextset()
        assert cursor.fetchone() == ("off",)
        # the same server connection, now another client's: the setting did not outlive it
        assert second.execute("SELECT current_setting('synchronous_commit')").fetchone() == ("on",)
        assert first.execute("SELECT current_setting('synchronous_commit')").fetchone() == ("on",)


def test_the_build_lock_is_released_at_commit_whoever_gets_the_server_connection_next(
        one_server_connection):
    key = "SELECT pg_try_advisory_xact_lock(hashtextextended('growth_sends.build:42', 0))"
    with client(one_server_connection) as builder, builder.transaction():
        assert builder.execute(key).fetchone() == (True,)
        # meanwhile, straight to the server: the lock is held
        with psycopg.connect(**_direct(), autocommit=True) as other:
            assert other.execute(key).fetchone() == (False,)
    with psycopg.connect(**_direct(), autocommit=True) as other:
        assert other.execute(key).fetchone() == (True,)  # released at the builder's commit
        held = other.execute(  # of this database: other runs may share the server
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())").fetchone()
        assert held == (0,)


def _direct() -> dict:
    from django.db import connection

    db = connection.settings_dict
    return {"host": db["HOST"] or None, "port": db["PORT"] or None, "user": db["USER"],
            "dbname": db["NAME"], "password": db["PASSWORD"] or None}


def test_racing_workers_killed_and_restarted_through_pgbouncer_send_each_recipient_once(
        bouncer, smtp_server, tmp_path):
    campaign = approved_campaign(count=600)
    env = subprocess_env(DATABASE_URL=bouncer.database_url(), DATABASE_POOL_MODE="transaction",
                         EMAIL_URL=smtp_server.url, SENDER_IDEMPOTENT_TRANSPORT="false",
                         SENDER_BACKOFF_BASE="0.1")
    options = ["--batch-size", "20", "--tick", "0.1", "--lease", "2"]
    logs = []

    def start(name: str, *extra: str) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed below
        logs.append(log)
        return subprocess.Popen(manage("run_sender", *options, "--worker-id", name, *extra),
                                env=env, stdout=log, stderr=subprocess.STDOUT)

    victim, steady = start("victim"), start("steady", "--until-idle")
    deadline = time.monotonic() + 60
    while Send.objects.filter(campaign=campaign, status="sent").count() < 100:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    again = start("victim-again", "--until-idle")
    assert steady.wait(timeout=120) == 0 and again.wait(timeout=120) == 0
    for log in logs:
        log.close()

    campaign.refresh_from_db()
    assert campaign.status == "sent"
    counts = statuses(campaign)
    assert set(counts) <= {"sent", "unknown"} and sum(counts.values()) == 600
    keys = Counter(smtp_server.handler.keys())
    assert max(keys.values()) == 1  # nobody twice
    # at most the chunks on the victim's wires at the kill (4 connections of 5)
    assert counts.get("unknown", 0) <= 4 * 5
    worker_logs = "".join((tmp_path / f"{n}.log").read_text()
                          for n in ("victim", "steady", "victim-again"))
    assert "prepared statement" not in worker_logs and "Traceback" not in worker_logs


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_the_chaos_harness_through_pgbouncer(tmp_path, idempotent):
    if not pgbouncer.available() and not os.environ.get("REQUIRE_PGBOUNCER_TESTS"):
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    config = ChaosConfig(
        recipients=1200, workers=3, idempotent=idempotent, lease=2.0, kill_every=0.6,
        faults=Misbehaviour(tempfail_rate=0.03, drop_rate=0.01, slow_rate=0.01, slow_delay=0.2),
        database_down_for=1.0, optout_every=0.5, optouts_per_round=3, out_dir=tmp_path,
        timeout=240, pgbouncer=True)
    report = run(config)

    assert report.problems() == []
    assert report.lost == 0 and report.duplicates == 0 and report.opted_out_then_delivered == 0
    assert report.kills >= 3 and report.clean_exits
    if settings.EMBEDDED_DATABASE:
        assert report.db_restarts == 1
    assert "prepared statement" not in "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert Campaign.objects.get().status == "sent"
