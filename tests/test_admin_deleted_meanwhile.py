"""A save whose form named a row that another operator deleted between its validation and its
save (an account, a campaign) gets its form back, the choice refused, rather than a 500: the
deferred foreign key fails at its commit (growth.admin.races)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from growth.models import Segment, Suppression
from tests.admin_forms import logged_in
from tests.helpers import on_its_own_connection


def _meanwhile(monkeypatch, admin_class, what) -> None:
    """Run ``what`` on another connection, committed, between the form's validation and its
    save (what an operator deleting the row at that moment does)."""
    original = admin_class.save_model

    def save_after_the_other_commits(self, *args, **kwargs):
        on_its_own_connection(what).join(timeout=30)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(admin_class, "save_model", save_after_the_other_commits)


@pytest.mark.django_db(transaction=True)
def test_a_segment_added_to_an_account_deleted_meanwhile_gets_its_form_back(
        monkeypatch, tenant, other_tenant):
    """Unique races are validated again; a row that a choice names, deleted between the
    validation and the save (a foreign key violation, SQLSTATE 23503, raised at commit), is a
    500. Validated again, the form says the choice is no longer valid."""
    client = logged_in("alice")
    client.raise_request_exception = False
    _meanwhile(monkeypatch, type(admin.site._registry[Segment]),
               lambda: type(other_tenant).objects.filter(pk=other_tenant.pk).delete())

    response = client.post(reverse("admin:growth_segment_add"),
                           {"account": other_tenant.pk, "name": "Newsletter"})

    assert response.status_code == 200, response.status_code
    assert "Select a valid choice" in response.content.decode()
    assert not Segment.objects.filter(name="Newsletter").exists()


@pytest.mark.django_db(transaction=True)
def test_a_suppression_naming_a_campaign_deleted_meanwhile_gets_its_form_back(
        monkeypatch, tenant):
    """The same with a nullable choice (a suppression's campaign)."""
    from tests.factories import CampaignFactory

    campaign = CampaignFactory(account=tenant)
    client = logged_in("alice")
    client.raise_request_exception = False
    _meanwhile(monkeypatch, type(admin.site._registry[Suppression]),
               lambda: type(campaign).objects.filter(pk=campaign.pk).delete())

    response = client.post(reverse("admin:growth_suppression_add"),
                           {"account": tenant.pk, "email_lower": "gone@example.com",
                            "reason": "manual", "campaign": campaign.pk})

    assert response.status_code == 200, response.status_code
    assert not Suppression.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_save_that_lost_a_race_to_a_delete_does_not_also_say_it_was_saved(
        monkeypatch, tenant, other_tenant):
    """Django says "was added successfully" before the deferred foreign key fails at the commit:
    the form shown again must not claim a save that was rolled back."""
    client = logged_in("alice")
    client.raise_request_exception = False
    admin_class = type(admin.site._registry[Segment])
    original = admin_class.save_model

    def save_after_the_other_commits(self, *args, **kwargs):
        on_its_own_connection(
            lambda: type(other_tenant).objects.filter(pk=other_tenant.pk).delete()).join(timeout=30)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(admin_class, "save_model", save_after_the_other_commits)
    response = client.post(reverse("admin:growth_segment_add"),
                           {"account": other_tenant.pk, "name": "Newsletter"})
    body = response.content.decode()
    assert response.status_code == 200 and "Select a valid choice" in body
    assert not Segment.objects.filter(name="Newsletter").exists()
    assert "successfully" not in body, "the page says the segment was added; nothing was"
