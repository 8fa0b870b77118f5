"""What an operator types into the environment or onto the command line means what it says, or
is refused with a message naming it: never silently read as something else, never a traceback,
never a busy loop later."""

from __future__ import annotations

import socket
import subprocess
import threading
from urllib.parse import quote

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.helpers import manage, subprocess_env


def setting(name: str, **env: str) -> tuple[int, str]:
    """(exit status, the setting's repr or the error) in a process with ``env``."""
    result = subprocess.run(
        manage("shell", "-c", f"from django.conf import settings; print(repr(settings.{name}))"),
        env=subprocess_env(**env), capture_output=True, text=True, timeout=120)
    return result.returncode, (result.stdout.strip().splitlines() or [""])[-1] + result.stderr


@pytest.mark.django_db
@pytest.mark.parametrize(("variable", "value", "read"), [
    ("SENDER_LEASE", "1e3", 1000.0),  # django-environ's env.float read 13
    ("SENDER_RATE_LIMIT", "2.5e2", 250.0),  # read 2.52
    ("SENDER_RATE_LIMIT", "0", 0.0),  # no limit
    ("SENDER_BACKOFF_BASE", " 0.5 ", 0.5),
])
def test_a_number_is_read_as_it_was_typed(variable, value, read):
    assert setting(variable, **{variable: value}) == (0, repr(read))


@pytest.mark.django_db
@pytest.mark.parametrize(("variable", "value"), [
    ("SENDER_LEASE", "5m"),  # five minutes? read as 5 seconds
    ("SENDER_LEASE", "0"), ("SENDER_LEASE", "-1"), ("SENDER_LEASE", "nan"),
    ("SENDER_RATE_LIMIT", "-3"), ("SENDER_RETRY_FOR_HOURS", "inf"),
    ("SENDER_CONNECTIONS", "0"), ("SENDER_HANDOFF_CHUNK", "0"),
])
def test_a_value_that_means_nothing_sensible_is_refused_by_name(variable, value):
    status, said = setting("SENDER_LEASE", **{variable: value})
    assert status != 0
    assert f"ImproperlyConfigured: {variable}=" in said


@pytest.mark.parametrize("tick", ["nan", "inf", "0", "-1", "soon"])
def test_run_sender_refuses_a_tick_that_is_no_duration(tick):
    with pytest.raises(CommandError, match="--tick"):
        call_command("run_sender", "--once", "--tick", tick)


@pytest.mark.parametrize("interval", ["0", "-5", "nan"])
def test_run_bounces_refuses_an_interval_that_never_waits(interval):
    with pytest.raises(CommandError, match="--interval"):
        call_command("run_bounces", "--once", "--interval", interval)


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_run_sender_refuses_a_metrics_port_that_is_no_port(port):
    with pytest.raises(CommandError, match="--metrics-port"):
        call_command("run_sender", "--once", "--metrics-port", port)


@pytest.mark.django_db
def test_run_sender_says_its_metrics_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            call_command("run_sender", "--once", "--metrics-port", str(port))


# --- a database that cannot serve the worker yet ---------------------------------------------

def run_sender_for(seconds: float, env: dict[str, str]) -> tuple[int | None, str]:
    """run_sender's exit status (None: still running when stopped) and what it printed."""
    worker = subprocess.Popen(manage("run_sender", "--tick", "0.2"), env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = worker.communicate(timeout=seconds)
        return worker.returncode, out
    except subprocess.TimeoutExpired:
        worker.terminate()
        out, _ = worker.communicate(timeout=30)
        return None, out


@pytest.mark.django_db(transaction=True)
def test_a_read_only_database_is_waited_out_like_one_that_is_away(tmp_path):
    """A standby that a failover's DNS still points at refuses every write (SQLSTATE 25006, an
    InternalError to Django): the worker waits for the primary instead of dying of it."""
    env = subprocess_env(EMAIL_URL=f"filemail://{tmp_path}")
    env["DATABASE_URL"] += "?options=" + quote("-c default_transaction_read_only=on")
    status, said = run_sender_for(8, env)
    assert status is None and "Traceback" not in said, said[-1500:]
    assert "read-only transaction" in said and "retrying in" in said


@pytest.mark.django_db(transaction=True)
def test_a_database_nobody_migrated_is_a_clear_refusal(tmp_path):
    db = connection.settings_dict
    admin = dict(host=db["HOST"] or None, port=db["PORT"] or None, user=db["USER"],
                 password=db["PASSWORD"] or None, dbname="postgres", autocommit=True)
    empty = db["NAME"] + "_unmigrated"
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{empty}"')
        conn.execute(f'CREATE DATABASE "{empty}"')
    try:
        env = subprocess_env(EMAIL_URL=f"filemail://{tmp_path}")
        env["DATABASE_URL"] = env["DATABASE_URL"].rsplit("/", 1)[0] + "/" + empty
        status, said = run_sender_for(60, env)
        assert status == 1 and "Traceback" not in said, said[-1500:]
        assert "migration" in said and "run manage.py migrate first" in said
    finally:
        with psycopg.connect(**admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{empty}" WITH (FORCE)')


def test_processes_starting_together_on_a_fresh_clone_share_the_database_one_of_them_made():
    """`make serve` and `make run` on a fresh clone, or gunicorn's workers importing the
    settings at once: each looks for the embedded server's database and creates it if missing.
    The losers of that race died at import (DuplicateDatabase, or UniqueViolation on
    pg_database's index); they now use the one the winner made."""
    import threading

    from zylior.embedded_db import _ensure_database

    db = connection.settings_dict
    admin = psycopg.conninfo.make_conninfo(host=db["HOST"] or None, port=db["PORT"] or None,
                                           user=db["USER"], password=db["PASSWORD"] or None,
                                           dbname="postgres")
    name = f"{db['NAME']}_raced"
    failures: list[BaseException] = []
    for _ in range(10):
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        barrier = threading.Barrier(4)

        def start(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                _ensure_database(admin, name)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=start) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
    assert failures == []


@pytest.mark.django_db
def test_commands_run_where_the_static_directory_cannot_be_made():
    """A container with a read-only root filesystem: importing the settings made STATIC_ROOT,
    and every manage.py command, run_sender included, died of it before it began."""
    status, said = setting("STATIC_ROOT", STATIC_ROOT="/proc/zylior-static")
    assert status == 0 and "Traceback" not in said, said[-800:]


@pytest.mark.django_db
def test_a_live_database_connection_carries_its_timeouts_and_keepalives():
    """What libpq itself was given for the connection the app uses: a silent network partition
    must not hold a worker in one call for the kernel's retransmission time."""
    with connection.cursor():
        given = connection.connection.info.get_parameters()
    if connection.settings_dict["HOST"].startswith("/"):
        pytest.skip("over a Unix socket, TCP's settings do not apply")
    assert {key: given.get(key) for key in ("connect_timeout", "keepalives", "keepalives_idle",
                                            "tcp_user_timeout")} == {
        "connect_timeout": "5", "keepalives": "1", "keepalives_idle": "30",
        "tcp_user_timeout": "60000"}


def test_a_database_host_that_never_answers_is_given_up_on_not_waited_for():
    """A host that takes the connection and says nothing (a hung server, a half-open path):
    connecting gives up after the connect timeout with an OperationalError, which the worker
    waits out as any outage."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # the kernel completes the handshake; nobody ever answers
    wrapper = DatabaseWrapper({**connection.settings_dict, "HOST": "127.0.0.1",
                               "PORT": silent.getsockname()[1]}, alias="silent")
    outcome: list[BaseException | None] = []

    def connect() -> None:  # as Django connects, with the settings' parameters
        try:
            wrapper.get_new_connection(wrapper.get_connection_params()).close()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    attempt = threading.Thread(target=connect, daemon=True)
    attempt.start()
    attempt.join(timeout=60)
    silent.close()
    assert outcome, "still connecting after 60 s"
    assert isinstance(outcome[0], psycopg.OperationalError) and "timeout" in str(outcome[0])
