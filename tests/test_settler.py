"""The settler: calls run in order on a thread of their own, at most ``depth`` waiting."""

from __future__ import annotations

import threading
import time

import pytest

from growth.sending.settler import Settler


def test_calls_run_in_order_off_the_callers_thread_and_close_runs_what_is_left():
    ran: list[tuple[int, str]] = []
    settler = Settler(depth=3)
    for n in range(5):
        settler.submit(lambda n=n: ran.append((n, threading.current_thread().name)))
    settler.close()
    assert [n for n, _ in ran] == [0, 1, 2, 3, 4]
    assert {name for _, name in ran} == {"settler"}


def test_submit_blocks_while_depth_calls_wait_and_drain_waits_for_all():
    release = threading.Event()
    done: list[int] = []
    settler = Settler(depth=1)
    settler.submit(lambda: (release.wait(5), done.append(1)))  # running
    settler.submit(lambda: done.append(2))  # waiting: the queue is full now
    third = threading.Thread(target=lambda: settler.submit(lambda: done.append(3)))
    third.start()
    time.sleep(0.2)
    assert third.is_alive()  # held back: the loop cannot race ahead of its bookkeeping
    release.set()
    third.join(5)
    settler.drain()
    assert done == [1, 2, 3]
    settler.close()


def test_a_failing_call_is_logged_and_the_next_ones_still_run(caplog):
    done: list[int] = []
    settler = Settler()
    settler.submit(lambda: 1 / 0)
    settler.submit(lambda: done.append(1))
    settler.close()
    assert done == [1]
    assert "settling failed" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_thread_closes_its_own_database_connection():
    from django.db import connection

    seen = {}

    def use_the_database():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            seen["pid"] = cursor.fetchone()[0]
        seen["connection"] = connection

    settler = Settler()
    settler.submit(use_the_database)
    settler.close()
    assert seen["connection"].connection is None  # closed when the thread ended
    deadline = time.monotonic() + 5  # the server ends the backend just after the goodbye
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [seen["pid"]])
            alive = cursor.fetchone()[0]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert alive == 0
