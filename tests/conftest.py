from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection, connections

from tests.smtp import SMTPServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Logging in is part of many tests: a deliberately slow hasher would dominate them."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def tenant():
    from tests.factories import AccountFactory

    return AccountFactory(name="Acme")


@pytest.fixture
def other_tenant():
    from tests.factories import AccountFactory

    return AccountFactory(name="Globex")


@pytest.fixture
def staff(client, tenant):
    """A staff operator of ``tenant``, logged in on ``client``."""
    from tests.factories import operator

    user = operator(tenant)
    client.force_login(user)
    return user


@pytest.fixture
def smtp_server():
    server = SMTPServer().start()
    yield server
    server.stop()


@pytest.fixture
def smtp_settings(settings, smtp_server):
    """Point Django's email backend at the loopback SMTP server."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = smtp_server.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_TIMEOUT = 10
    return smtp_server


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
    })
    env.update(extra)
    return env


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]
