"""What an operator's admin request may ask for beyond the pages' own links: a list filtered by a
field no filter offers, a popup or an autocomplete naming a reverse relation, an account renamed to
another tenant's slug. A clear 4xx, never a 500, and nothing read or learnt that no page shows."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from growth.models import Destination, SendingDomain
from tests.factories import SegmentFactory, UserFactory
from tests.scenarios import operator, sending_campaign

pytestmark = pytest.mark.django_db

KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7secret\n"


def logged_in(user) -> Client:
    client = Client(raise_request_exception=False)  # a 500 is an answer here, not an error
    client.force_login(user)
    return client


def test_a_viewer_cannot_read_the_private_key_through_a_list_filter(tenant):
    SendingDomain.objects.create(account=tenant, domain="acme.example", selector="zy1",
                                 private_key=KEY)
    client = logged_in(operator(viewer_of=(tenant,)))
    url = reverse("admin:growth_sendingdomain_changelist")

    # one character at a time, the list's row count would spell the key out
    for guess in ("-----BEGIN PRIVATE KEY-----\nM", "-----BEGIN PRIVATE KEY-----\nX"):
        response = client.get(url, {"private_key__startswith": guess})
        assert response.status_code == 400
        assert "acme.example" not in response.content.decode()


@pytest.mark.parametrize("model,lookup,value", [
    ("campaign", "name__regex", "("),
    ("subscriber", "email_lower__iregex", "[a"),
    ("send", "id__range", "1"),
    ("suppression", "created_at__year", "99999999999"),
])
def test_a_list_lookup_no_filter_offers_is_refused_not_a_500(tenant, model, lookup, value):
    sending_campaign(count=1, account=tenant)
    response = logged_in(operator(tenant)).get(
        reverse(f"admin:growth_{model}_changelist"), {lookup: value})
    assert response.status_code == 400


def test_the_filters_and_the_links_between_lists_still_filter(tenant):
    campaign = sending_campaign(count=2, account=tenant)
    client = logged_in(operator(tenant))
    sends = reverse("admin:growth_send_changelist")
    for query in ({"campaign__id__exact": campaign.pk, "status__exact": "queued"},
                  {"needs_review": "yes"}, {"campaign__id__exact": campaign.pk, "_facets": "1"}):
        assert client.get(sends, query).status_code == 200, query
    assert client.get(reverse("admin:growth_feedbackevent_changelist"),
                      {"esp": "postmark", "suppressed__exact": "1"}).status_code == 200
    gmail = Destination.objects.create(name="gmail")
    root = logged_in(UserFactory(is_staff=True, is_superuser=True))
    for name in ("maildomain", "ratelimit"):  # the destinations list links to both
        response = root.get(reverse(f"admin:growth_{name}_changelist"),
                            {"destination__id__exact": gmail.pk})
        assert response.status_code == 200, name


def test_a_popup_selecting_by_a_reverse_relation_is_refused_not_a_500(tenant):
    client = logged_in(operator(tenant))
    segment = SegmentFactory(account=tenant)
    for url in (reverse("admin:growth_segment_changelist"),
                reverse("admin:growth_segment_change", args=[segment.pk])):
        response = client.get(url, {"_to_field": "campaign", "_popup": "1"})
        assert response.status_code == 400, url
    assert client.get(reverse("admin:growth_segment_changelist"),
                      {"_to_field": "id", "_popup": "1"}).status_code == 200


def test_an_autocomplete_of_a_reverse_relation_is_refused_not_a_500(tenant):
    SegmentFactory(account=tenant, name="Newsletter")
    client = logged_in(operator(viewer_of=(tenant,)))
    url = reverse("admin:autocomplete")
    for model, field in (("account", "campaigns"), ("segment", "campaign"), ("send", "+")):
        response = client.get(url, {"app_label": "growth", "model_name": model,
                                     "field_name": field, "term": ""})
        assert response.status_code == 403, (model, field)
    response = client.get(url, {"app_label": "growth", "model_name": "subscriber",
                                "field_name": "segment", "term": "news"})
    assert [r["text"] for r in response.json()["results"]] == ["Newsletter"]


def test_renaming_an_account_does_not_tell_whether_another_tenant_has_the_slug(tenant,
                                                                               other_tenant):
    client = logged_in(operator(tenant))
    url = reverse("admin:growth_account_change", args=[tenant.pk])
    page = client.get(url)
    assert page.status_code == 200 and 'name="slug"' not in page.content.decode()
    answers = []
    for slug in (other_tenant.slug, "nobody-has-this-one"):
        response = client.post(url, {"name": tenant.name, "slug": slug,
                                     "from_email": tenant.from_email, "from_name": tenant.from_name,
                                     "time_zone": "UTC", "seen_version": tenant.version})
        answers.append(response.status_code)
        assert "already exists" not in response.content.decode()
    assert answers == [302, 302]
    tenant.refresh_from_db()
    assert tenant.slug != "nobody-has-this-one"  # a tenant's slug is the platform's to set


def test_every_link_of_every_lists_filters_answers(tenant, other_tenant):
    """The filters a list offers are the filters it takes: each link of each list's filter panel
    (as a superuser, who sees every filter) shows the list."""
    sending_campaign(count=2, account=tenant)
    sending_campaign(count=1, account=other_tenant)
    client = logged_in(UserFactory(is_staff=True, is_superuser=True))
    followed = 0
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        page = client.get(url)
        assert page.status_code == 200, url
        panel = page.content.decode().partition('id="changelist-filter"')[2]
        links = set(html.unescape(link) for link in re.findall(r'href="(\?[^"]*)"', panel))
        for link in links:
            assert client.get(url + link).status_code == 200, url + link
        followed += len(links)
    assert followed > 60  # the panels were found and read
