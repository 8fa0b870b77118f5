"""Operators' per-recipient history: one address across a tenant's campaigns, with the evidence
(ESP feedback, verdicts) behind each outcome; another tenant's account is a 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from growth.admin.address_history import address_history_url
from growth.models import FeedbackEvent, Send
from growth.operations.campaigns import pause_campaign
from growth.operations.follow_ups import create_follow_up
from growth.operations.unknown_sends import mark_not_delivered
from tests.scenarios import make_unknown, operator, sending_campaign

pytestmark = pytest.mark.django_db

PAGE = reverse("admin:growth_send_address")


def test_one_address_across_campaigns_with_its_evidence(client, staff, tenant):
    first = sending_campaign(count=1, account=tenant, name="Spring")
    [lost] = make_unknown(1)
    mark_not_delivered(send_ids=[lost], decided_by="operator ann", evidence="the relay's log")
    pause_campaign(campaign_id=first.id)
    row = Send.objects.get(id=lost)
    FeedbackEvent.objects.create(esp="mailgun", event_id="e1", event_type="bounced",
                                 email_lower=row.email_lower, account=tenant, campaign=first,
                                 send=row, mta_response="550 5.1.1 no such user")
    follow_up = create_follow_up(campaign_id=first.id)
    response = client.get(address_history_url(tenant.id, row.email.upper()))
    body = response.content.decode()
    assert response.status_code == 200
    assert "Spring" in body and row.job_id in body
    assert f"&lt;campaign.{first.id}." in body  # the Message-ID to search a relay's log for
    assert "operator ann" in body and "the relay&#x27;s log" in body
    assert "550 5.1.1 no such user" in body
    assert "resent by a follow-up" not in body  # not built yet: nothing taken
    # the send's page links here
    page = client.get(reverse("admin:growth_send_change", args=[lost])).content.decode()
    assert address_history_url(tenant.id, row.email_lower).replace("&", "&amp;") in page
    assert follow_up.resend_of_id == first.id


def test_another_tenants_account_is_a_404_and_a_bad_address_an_error(client, tenant, other_tenant):
    theirs = sending_campaign(count=1, account=other_tenant)
    address = Send.objects.get(campaign=theirs).email_lower
    client.force_login(operator(tenant))
    assert client.get(address_history_url(other_tenant.id, address)).status_code == 404
    for odd in ("x", "²", "٣", "99999999999999999999999"):  # "²": a digit to str.isdigit()
        assert client.get(PAGE, {"account": odd, "email": address}).status_code == 404
    mine = client.get(address_history_url(tenant.id, address))
    assert mine.status_code == 200 and theirs.name not in mine.content.decode()
    bad = client.get(address_history_url(tenant.id, "not an address\r\nBcc: x@y"))
    assert bad.status_code == 200 and bad.context["form"].errors["email"]
