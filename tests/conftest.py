from __future__ import annotations

import pytest

from tests.smtp import SMTPServer


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
    from tests.scenarios import operator

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
