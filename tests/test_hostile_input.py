"""A sweep of hostile values through every admin and /app/ form, the admin's lists and the
public pages: a clear 4xx or a form error, never a 5xx, whoever posts it."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, RequestFactory
from django.urls import reverse

from growth.models import Suppression
from tests.factories import CampaignFactory, SegmentFactory, SubscriberFactory
from tests.scenarios import member, operator, sending_campaign

pytestmark = pytest.mark.django_db

HOSTILE = [
    "Acme\r\nBcc: everyone@example.com",
    "nul\x00byte",
    "x" * 70_000,
    "<script>alert(1)</script>",
    "=cmd|'/c calc'!A0",
    "'; DROP TABLE growth_sends; --",
    "-1",
    "99999999999999999999999",
    "abc",
    "",
    "🙂" * 500,
    "nëws@bücher.example",
    "1e309",
    "../../etc/passwd",
]
_FIELD = re.compile(r'<(?:input|select|textarea)[^>]*\bname="([^"]+)"')
_SKIP = {"csrfmiddlewaretoken", "_save", "_continue", "_addanother", "_popup", "_changelist_filters"}


def field_names(html: str) -> list[str]:
    return sorted({name for name in _FIELD.findall(html) if name not in _SKIP
                   and not name.endswith(("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS",
                                          "MAX_NUM_FORMS"))})


def assert_no_5xx(client: Client, method: str, url: str, **kwargs) -> None:
    response = getattr(client, method)(url, **kwargs)
    assert response.status_code < 500, (method, url, response.status_code)


def admin_forms(world) -> list[str]:
    """Every add page, and the change page of one object of each model."""
    urls = []
    for model in admin.site._registry:
        opts = model._meta
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))
        obj = model._default_manager.first()
        if obj is not None:
            urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk]))
    return urls


@pytest.fixture
def world(tenant, other_tenant):
    campaign = sending_campaign(count=3, account=tenant)
    CampaignFactory(account=other_tenant)
    Suppression.objects.create(account=tenant, email_lower="gone@example.com")
    SubscriberFactory(segment=SegmentFactory(account=other_tenant))
    return campaign


@pytest.mark.parametrize("who", ["superuser", "staff editor", "staff viewer"])
def test_hostile_values_in_every_admin_form_never_answer_5xx(client, world, tenant, who,
                                                            django_user_model):
    if who == "superuser":
        client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    else:
        client.force_login(operator(tenant) if who == "staff editor"
                           else operator(viewer_of=(tenant,)))
    for url in admin_forms(world):
        page = client.get(url)
        assert page.status_code < 500, url
        names = field_names(page.content.decode()) if page.status_code == 200 else ["name"]
        for value in HOSTILE:
            assert_no_5xx(client, "post", url, data={name: value for name in names})


def test_hostile_values_in_admin_lists_searches_filters_and_actions(admin_client, world):
    for model in admin.site._registry:
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        for value in HOSTILE:
            assert_no_5xx(admin_client, "get", url, data={"q": value})
            assert_no_5xx(admin_client, "get", url, data={"status": value, "o": value,
                                                          "campaign__id__exact": value,
                                                          "account__id__exact": value, "p": value})
            assert_no_5xx(admin_client, "post", url, data={"action": value,
                                                           "_selected_action": [value]})
    for value in ("abc", "0", "-1", "99999999999999999999999", "1%00", "x" * 500):
        assert_no_5xx(admin_client, "post", f"/admin/growth/campaign/{value}/send-test/")
        assert_no_5xx(admin_client, "get", f"/admin/growth/campaign/{value}/change/")


def test_hostile_values_in_every_app_form_never_answer_5xx(client, world, tenant):
    client.force_login(member(tenant))
    slug = tenant.slug
    for value in HOSTILE:
        assert_no_5xx(client, "post", reverse("growth:tenant:suppression-add", args=[slug]),
                      data={"addresses": value, "reason": value})
        assert_no_5xx(client, "get", reverse("growth:tenant:suppressions", args=[slug]),
                      data={"q": value, "reason": value, "page": value})
        assert_no_5xx(client, "get", reverse("growth:tenant:lookup", args=[slug]),
                      data={"email": value})
        upload = SimpleUploadedFile("list.csv", value.encode("utf-8", "surrogatepass"))
        assert_no_5xx(client, "post", reverse("growth:tenant:suppression-import", args=[slug]),
                      data={"file": upload, "skip_invalid": value, "check_only": value})
    for pk in ("0", "99999999999999999999999"):
        assert_no_5xx(client, "post", f"/app/accounts/{slug}/suppressions/{pk}/remove/")
    for bad_slug in ("x" * 300, "..", "%00"):
        assert_no_5xx(client, "get", f"/app/accounts/{bad_slug}/suppressions/")


def test_hostile_tokens_on_the_public_unsubscribe_page(client):
    for value in [*HOSTILE[1:], "a:b:c", "W10:1abc", "eyJhIjoxfQ:" + "A" * 43]:
        for method in ("get", "post"):
            response = getattr(client, method)(f"/u/{value.replace('/', '')}x/")
            assert response.status_code < 500, (method, value)


@pytest.mark.parametrize("selected", ["abc", "1\x00", "1.5", ""])
@pytest.mark.parametrize("model,action", [("campaign", "pause"), ("campaign", "send_test_to_me"),
                                          ("subscriber", "confirm_pending"),
                                          ("send", "mark_as_delivered"),
                                          ("suppression", "delete_selected"),
                                          ("maildomain", "forget"),
                                          ("membership", "delete_selected")])
def test_an_action_on_a_selected_value_that_is_no_id_is_a_4xx_not_a_500(tenant, model, action,
                                                                        selected):
    sending_campaign(count=1, account=tenant)
    client = Client(raise_request_exception=False)
    client.force_login(operator(tenant, is_superuser=model in ("maildomain", "membership")))
    response = client.post(reverse(f"admin:growth_{model}_changelist"),
                           {"action": action, "_selected_action": [selected]})
    # a mail domain's key is its name: any text but a NUL may be one, found or not
    assert response.status_code == (400 if model != "maildomain" or "\x00" in selected else 302)


def test_every_admins_actions_refuse_a_selected_value_that_is_no_id(tenant):
    """Other apps' admins too (auth's users and groups, axes' sign-in records)."""
    sending_campaign(count=1, account=tenant)
    client = Client(raise_request_exception=False)
    client.force_login(operator(tenant, is_superuser=True))
    request = RequestFactory().get("/admin/")
    request.user = operator(tenant, is_superuser=True)
    for model, model_admin in admin.site._registry.items():
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for action in model_admin.get_actions(request):
            response = client.post(url, {"action": action, "_selected_action": ["1\x00"]})
            assert response.status_code == 400, (url, action, response.status_code)
