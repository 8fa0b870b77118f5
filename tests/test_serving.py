"""The site as it runs in production: gunicorn (DEBUG off) serving the one-click unsubscribe, the
static files and the admin; health checks; Django's deployment checklist."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from django.test import Client

from growth.models import Suppression
from growth.sending.unsubscribe import make_token
from tests.factories import SubscriberFactory
from tests.helpers import manage, subprocess_env
from tests.servers import Gunicorn, TcpProxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def site(tmp_path):
    server = Gunicorn(tmp_path / "gunicorn.log")
    yield server
    server.stop()


def test_gunicorn_answers_the_one_click_post_static_files_and_the_admin_login(
        site, tenant, django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # gunicorn's
    subscriber = SubscriberFactory(segment__account=tenant)
    token = make_token(account_id=tenant.id, subscriber_id=subscriber.id, campaign_id=None)

    # RFC 8058: a mail client's POST, no cookie, no CSRF token, the body it prescribes
    one_click = site.post(f"/u/{token}/", data="List-Unsubscribe=One-Click",
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert one_click.status_code == 200
    assert Suppression.objects.filter(account=tenant, email_lower=subscriber.email_lower).exists()

    css = site.get("/static/admin/css/base.css")
    assert css.status_code == 200 and css.headers["Content-Type"].startswith("text/css")
    assert "Cache-Control" in css.headers  # WhiteNoise's, not Django's static view

    django_user_model.objects.create_superuser("boss", "boss@example.com", "a-long-password-1")
    page = site.get("/admin/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
    login = site.post("/admin/login/?next=/admin/", cookies=page.cookies, data={
        "username": "boss", "password": "a-long-password-1", "csrfmiddlewaretoken": csrf,
        "next": "/admin/"}, headers={"Referer": site.url + "/admin/login/"})
    assert login.status_code == 302 and login.headers["Location"] == "/admin/"
    assert site.get("/admin/", cookies=login.cookies).status_code == 200


def test_healthz_needs_no_database_and_readyz_follows_it(tmp_path):
    proxy = TcpProxy()
    site = Gunicorn(tmp_path / "gunicorn.log", DATABASE_URL=proxy.database_url)
    try:
        assert site.get("/readyz").json() == {"status": "ok"}
        proxy.cut()
        down = site.get("/readyz")
        assert down.json() == {"status": "unavailable", "database": "unavailable"}
        assert down.status_code == 503  # and the driver's text, host and port, only in the log:
        assert "readiness: the database does not answer (connection" in (
            tmp_path / "gunicorn.log").read_text()
        assert site.get("/healthz").status_code == 200  # the process is fine
        proxy.mend()
        deadline = time.monotonic() + 10
        while (up := site.get("/readyz")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert up.json() == {"status": "ok"}
    finally:
        site.stop()
        proxy.close()


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
@pytest.mark.parametrize("host", ["10.1.2.3:8000", "growth.example.com"])
def test_a_probe_at_the_process_itself_is_answered_under_production_settings(settings, path,
                                                                              host):
    """A kubelet or a load balancer's check addresses the process by its IP, over plain HTTP,
    without the proxy's X-Forwarded-Proto: neither the host check (a 400) nor the redirect to
    https (a 301) may keep the target from becoming healthy. Anything else still gets both."""
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["growth.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert Client().get(path, HTTP_HOST=host).json() == {"status": "ok"}
    assert Client().post(path, HTTP_HOST=host).status_code == 405
    expected = 400 if host.startswith("10.") else 301
    assert Client().get("/admin/login/", HTTP_HOST=host).status_code == expected


def test_readyz_says_when_migrations_are_missing(client, monkeypatch):
    from django.db.migrations.executor import MigrationExecutor

    monkeypatch.setattr(MigrationExecutor, "migration_plan", lambda self, targets: ["one"])
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["migrations_pending"] == 1


PRODUCTION_ENV = {  # as the README's "Running it for real" documents it
    "DEBUG": "false",
    "SECRET_KEY": "k8#Zq1-LxC2vT9!mR4pW7sY0uB3nE6hJ5gD2fA8cV1xZ4qT7wE0rY3uI6oP9aS2dF5gH8",
    "ALLOWED_HOSTS": "growth.example.com",
    "SITE_URL": "https://growth.example.com",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}


def test_the_deployment_checklist_is_clean_with_the_documented_production_env():
    env = subprocess_env(**PRODUCTION_ENV)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the browser tests' (Playwright), not production's
    result = subprocess.run(manage("check", "--deploy", "--fail-level", "WARNING"), env=env,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"no issues" in result.stdout


def test_the_serve_command_collects_static_files_and_runs_gunicorn(tmp_path):
    from tests.smtp import free_port

    port = free_port()
    process = subprocess.Popen(manage("serve", "--bind", f"127.0.0.1:{port}", "--workers", "1"),
                               env=subprocess_env(STATIC_ROOT=str(tmp_path / "static")),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        from growth.chaos.pgbouncer import wait_until_listening

        wait_until_listening(port, process=process)
        assert (tmp_path / "static" / "admin" / "css" / "base.css.gz").exists()  # compressed
        import requests

        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.mark.parametrize(("env", "domain"), [
    ({"SITE_URL": "https://Bücher.example"}, "xn--bcher-kva.example"),
    ({"MESSAGE_ID_DOMAIN": "bücher.example"}, "xn--bcher-kva.example"),
])
def test_message_ids_are_made_with_the_sites_domain_in_idna_form(env, domain):
    """A header holds ASCII: from a non-ASCII host a Message-ID was an RFC 2047 encoded word."""
    result = subprocess.run(
        manage("shell", "-c", "from django.conf import settings; print(settings.MESSAGE_ID_DOMAIN)"),
        env=subprocess_env(**env), capture_output=True, timeout=60)
    assert result.stdout.decode().splitlines()[-1] == domain, result.stderr.decode()[-2000:]
