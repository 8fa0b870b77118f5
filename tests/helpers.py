"""Helpers shared by the tests: threads on their own connections, subprocesses on the test
database, and what a response told its user."""

from __future__ import annotations

import html
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.contrib.messages import get_messages
from django.db import connection, connections

ROOT = Path(__file__).resolve().parent.parent


# leases._on_the_wire, in the counts an operator reads: a live lease's rows still queued, each
# found by its primary key (the only read of growth_sends the tallies' readers make)
LEASED_PROBE = "(SELECT s.status FROM growth_sends s WHERE s.id = held.id)"


def log_in(page, path: str, username: str) -> None:
    """Sign in on a Playwright page at ``path`` (a user made with the factories' password)."""
    page.goto(path)
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.get_by_role("button", name=re.compile("Log in", re.I)).click()


@contextmanager
def two_tabs_on(browser, live_server, path: str, *, username: str = "alice"):
    """Two tabs of one signed-in superuser, both opened on ``path``: an editor who saves first,
    and one whose page is then older."""
    from django.urls import reverse

    from tests.factories import UserFactory

    UserFactory(username=username, is_staff=True, is_superuser=True)
    context = browser.new_context(base_url=live_server.url)
    try:
        first, second = context.new_page(), context.new_page()
        log_in(first, reverse("admin:login"), username)
        for page in (first, second):
            page.goto(path)
        yield first, second
    finally:
        context.close()


def texts(response) -> list[str]:
    """The messages (django.contrib.messages) the response's request left for its user."""
    return [str(m) for m in get_messages(response.wsgi_request)]


_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


def confirm(client, url: str, data: dict | None = None, **kwargs):
    """Ask for a confirmation page (GET, or POST ``data``: a list's action), then post its form
    as an operator's browser would: every hidden field the page holds (what it promised)."""
    return post_back(client, url, client.post(url, data) if data else client.get(url), **kwargs)


def post_back(client, url: str, page, **kwargs):
    """Post a confirmation page shown earlier (``page``: things may have changed since) as its
    form would: every hidden field it holds."""
    fields: dict[str, list[str]] = {}
    for name, value in _HIDDEN.findall(page.content.decode()):
        if name != "csrfmiddlewaretoken":
            fields.setdefault(name, []).append(html.unescape(value))
    return client.post(url, fields, **kwargs)


def concurrently(count: int, func: Callable[[int], object]) -> list[object]:
    """Run func(0..count-1) in ``count`` threads released at the same instant, each on its own
    database connection; return the results in order (an exception is re-raised)."""
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = func(i)
        except BaseException as exc:  # surfaced to the test below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def on_its_own_connection(func: Callable[[], object],
                          outcome: dict | None = None) -> threading.Thread:
    """Start func in a thread, on a database connection of its own, closed when it returns;
    ``outcome`` (if given) gets its ``result`` or the ``error`` it raised."""

    def run() -> None:
        try:
            result = func()
            if outcome is not None:
                outcome["result"] = result
        except Exception as exc:
            if outcome is None:
                raise
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def waiting_on_a_lock(timeout: float = 10.0) -> bool:
    """Whether another session of this database waits for a lock within ``timeout`` seconds
    (a race staged: the statement that should wait does)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            # the statistics are read once a transaction, and the caller may be in one
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.01)
    return False


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a manage.py subprocess that must use this test database."""
    db = connection.settings_dict
    host = quote(db["HOST"] or "", safe="")
    port = f":{db['PORT']}" if db["PORT"] else ""
    password = f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else ""
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": f"postgres://{db['USER']}{password}@{host}{port}/{db['NAME']}",
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": "INFO",
        "DESTINATIONS_DNS": "off",  # offline, as in tests/conftest.py
    })
    env.update(extra)
    return env


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def fetch_dicts(cursor) -> list[dict]:
    """The cursor's remaining rows, each as {column: value}."""
    names = [column.name for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def wait_for(condition: Callable[[], object], timeout: float = 60.0) -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
