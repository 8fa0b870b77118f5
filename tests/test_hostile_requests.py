"""What a request carries besides its forms' fields: a session cookie, the username a sign-in is
tried with, an object page's ``_to_field``. A clear answer, never a 500 (see
growth/request_guards.py and growth/admin/scoping.py)."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from growth.models import Membership
from tests.factories import UserFactory
from tests.scenarios import member, operator, sending_campaign

pytestmark = pytest.mark.django_db


def answering(user=None) -> Client:
    client = Client(raise_request_exception=False)  # a 500 is an answer here, not an error
    if user is not None:
        client.force_login(user)
    return client


# a quoted cookie value may carry octal escapes: this one is "abcdefghij" and a NUL
NUL_SESSION = 'sessionid="abcdefghij\\000"'


@pytest.mark.parametrize("path", ["/", "/admin/", "/admin/login/", "/app/", "/app/login/"])
def test_a_session_cookie_with_a_nul_is_no_session_not_a_500(tenant, path):
    response = answering().get(path, HTTP_COOKIE=NUL_SESSION)
    assert response.status_code in (200, 302), response.status_code
    if path == "/admin/":
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_a_session_cookie_with_a_nul_still_lets_the_user_sign_in(tenant):
    user = member(tenant)
    user.set_password("pw")
    user.save()
    response = answering().post("/app/login/", {"username": user.username, "password": "pw"},
                                HTTP_COOKIE=NUL_SESSION)
    assert response.status_code == 302 and response["Location"] == reverse("growth:tenant:home")


@pytest.mark.parametrize("path", ["/admin/login/", "/app/login/"])
@pytest.mark.parametrize("length", [256, 5000])
def test_a_username_longer_than_any_is_a_failed_sign_in_and_counted(tenant, path, length):
    username = "x" * length
    response = answering().post(path, {"username": username, "password": "guess"})
    assert response.status_code == 200 and not response.context["form"].is_valid()
    attempt = AccessAttempt.objects.get()
    assert attempt.username == username[:255] and attempt.failures_since_start == 1


@pytest.mark.parametrize("view", ["change", "delete"])
def test_an_empty_to_field_on_an_object_page_shows_the_object_not_a_500(tenant, view):
    """Every admin's object pages, other apps' too (auth's, axes')."""
    sending_campaign(count=1, account=tenant)
    Membership.objects.create(account=tenant, user=UserFactory(), role="viewer")
    AccessAttempt.objects.create(username="u", ip_address="127.0.0.1", user_agent="ua",
                                 http_accept="*/*", path_info="/", failures_since_start=1)
    client = answering(operator(tenant, is_superuser=True))
    checked = []
    for model in admin.site._registry:
        obj = model._default_manager.first()
        if obj is None:
            continue
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}",
                      args=[obj.pk])
        for method in ("get", "post"):
            response = getattr(client, method)(f"{url}?_to_field=", {})
            assert response.status_code < 500, (method, url, response.status_code)
        # the page it is without one (some objects no admin deletes: 403 either way)
        assert client.get(f"{url}?_to_field=").status_code == client.get(url).status_code, url
        checked.append(model._meta.model_name)
    assert {"account", "membership", "campaign", "send", "user", "accessattempt"} <= set(checked)


def test_an_empty_to_field_shows_another_tenants_object_no_more_than_without(tenant,
                                                                             other_tenant):
    theirs = sending_campaign(count=1, account=other_tenant)
    client = answering(operator(tenant))
    for view in ("change", "delete"):
        url = reverse(f"admin:growth_campaign_{view}", args=[theirs.pk])
        assert client.get(f"{url}?_to_field=").status_code == 404, view
