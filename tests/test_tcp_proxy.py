"""tests.servers.TcpProxy, which the outage tests put between a worker and PostgreSQL: once a
connection through it ends, from either side, its PostgreSQL session ends too (a session left
behind keeps the test database from being dropped at the end of the run)."""

from __future__ import annotations

import os
import socket

import psycopg
import pytest
from django.db import connection

from tests.helpers import wait_for
from tests.servers import TcpProxy

pytestmark = pytest.mark.django_db


@pytest.fixture
def proxy():
    proxy = TcpProxy()
    yield proxy
    proxy.close()


def session_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # read once a transaction otherwise
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] > 0


def vanish(client: psycopg.Connection) -> None:
    """Hang up as a killed process does: no Terminate message, only the end of the stream."""
    with socket.socket(fileno=os.dup(client.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)


def test_a_client_that_vanishes_ends_its_session(proxy):
    client = psycopg.connect(proxy.database_url)
    pid = client.info.backend_pid
    vanish(client)
    wait_for(lambda: not session_alive(pid), timeout=5)
    client.close()


def test_a_cut_ends_every_session(proxy):
    """The outage tests' leak: cut() woke one direction of a connection, whose thread closed
    the other's socket before cut() came to it (a race: a few sessions out of several)."""
    clients = [psycopg.connect(proxy.database_url) for _ in range(5)]
    pids = [client.info.backend_pid for client in clients]
    proxy.cut()
    wait_for(lambda: not any(session_alive(pid) for pid in pids), timeout=5)
    for client in clients:
        client.close()
