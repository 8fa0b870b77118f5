"""Sign-in throttling (django-axes) on the admin's and the tenants' login pages: failures are
counted per username and client address, so a guesser is stopped and the user is not, and a
forwarded header is believed only as far as the proxies the install says it has."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.scenarios import member, operator

pytestmark = pytest.mark.django_db

LIMIT = 3
LOGIN_PAGES = {"tenant": "growth:tenant:login", "admin": "admin:login"}


@pytest.fixture(autouse=True)
def limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT


@pytest.fixture(params=sorted(LOGIN_PAGES))
def page(request, tenant):
    user = operator(tenant, username="olga") if request.param == "admin" else member(
        tenant, username="tina")
    return reverse(LOGIN_PAGES[request.param]), user.username


def sign_in(client, url, username, password, address="10.0.0.1", **headers):
    return client.post(url, {"username": username, "password": password},
                       REMOTE_ADDR=address, headers=headers)


def fail(client, url, username, times, **kwargs) -> list[int]:
    return [sign_in(client, url, username, "wrong", **kwargs).status_code for _ in range(times)]


def test_a_guesser_is_stopped_even_with_the_right_password_and_told_why(client, page):
    url, username = page
    # The form again until the limit; the failure that reaches it is refused already.
    assert fail(client, url, username, LIMIT) == [200] * (LIMIT - 1) + [429]
    refused = sign_in(client, url, username, "pw")
    assert refused.status_code == 429
    assert f"After {LIMIT} failed sign-ins" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_user_signs_in_from_elsewhere_and_another_user_from_there(client, page, tenant):
    url, username = page
    assert fail(client, url, username, LIMIT + 2)[-1] == 429
    assert sign_in(client, url, username, "pw", address="10.0.0.2").status_code == 302
    client.logout()
    other = member(tenant, username="otto")
    assert sign_in(client, url, other.username, "pw").status_code in (200, 302)  # not 429
    client.logout()
    assert sign_in(client, url, other.username, "wrong").status_code == 200


def test_a_success_starts_the_count_again(client, page):
    url, username = page
    assert fail(client, url, username, LIMIT - 1) == [200] * (LIMIT - 1)
    assert sign_in(client, url, username, "pw").status_code == 302
    client.logout()
    assert fail(client, url, username, LIMIT - 1) == [200] * (LIMIT - 1)
    assert sign_in(client, url, username, "pw").status_code == 302


def test_without_a_trusted_proxy_a_forwarded_header_changes_nothing(client, tenant):
    url, username = reverse(LOGIN_PAGES["tenant"]), member(tenant).username
    for n in range(LIMIT):
        sign_in(client, url, username, "wrong", X_Forwarded_For=f"192.0.2.{n}")
    assert sign_in(client, url, username, "pw", X_Forwarded_For="192.0.2.99").status_code == 429


def test_behind_a_trusted_proxy_the_address_it_saw_is_the_clients(client, tenant, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    url, username = reverse(LOGIN_PAGES["tenant"]), member(tenant).username
    # Whatever the client put in front of the proxy's entry is not believed.
    for n in range(LIMIT):
        sign_in(client, url, username, "wrong", X_Forwarded_For=f"198.51.100.{n}, 192.0.2.7")
    assert sign_in(client, url, username, "pw", X_Forwarded_For="192.0.2.7").status_code == 429
    # All of them came through the proxy (one REMOTE_ADDR), yet another client is not locked out.
    assert sign_in(client, url, username, "pw", X_Forwarded_For="192.0.2.8").status_code == 302


@pytest.mark.parametrize(("trusted", "address", "forwarded"), [
    (1, "10.0.0.1", "not-an-address"), (1, "10.0.0.1", ""), (0, "", ""), (0, "unix:/run/g.sock", ""),
])
def test_a_client_address_that_is_no_ip_address_is_a_failed_sign_in_not_a_500(
        client, tenant, settings, trusted, address, forwarded):
    """The throttle stores the address in an inet column: a header a misconfigured proxy sent,
    or gunicorn on a Unix socket (no REMOTE_ADDR), was a DataError."""
    settings.TRUSTED_PROXY_COUNT = trusted
    url, username = reverse(LOGIN_PAGES["tenant"]), member(tenant).username
    headers = {"X_Forwarded_For": forwarded} if forwarded else {}
    assert sign_in(client, url, username, "wrong", address=address, **headers).status_code == 200
    assert sign_in(client, url, username, "pw", address=address, **headers).status_code == 302
