from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.smtp import SMTPServer


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Logging in is part of many tests: a deliberately slow hasher would dominate them."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def no_dns_for_destinations(settings):
    """Tests run offline: with the system's resolver every build would wait on DNS timeouts."""
    settings.DESTINATIONS_DNS = "off"


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


# --- Playwright in Debian's chromium, one browser for the whole run (browser tests) ------------

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: apt-get install chromium to run the browser tests"
        if os.environ.get("REQUIRE_BROWSER_TESTS"):
            pytest.fail(reason)
        pytest.skip(reason)
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are
    # still synchronous and safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def drop_copies():
    """The bench's copies of growth_sends (bench/directions.py), dropped after the test."""
    yield
    from bench import directions

    directions.drop()
